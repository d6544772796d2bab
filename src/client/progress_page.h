/* The progress page: the fixed-layout record a training job and its node agent
 * share through a small mmap'ed file (normally in /dev/shm).
 *
 * The agent creates and sizes the file (CreateProgressPage in
 * client/progress_reader.h, or gandiva_page_create() in
 * client/gandiva_client.h) and passes its path to the job in
 * GANDIVA_PROGRESS_FILE; the job maps it in gandiva_init(). Both sides map the
 * same bytes, so this header is the whole wire format. It compiles as C11 and
 * as C++20.
 *
 * Ownership: every field has exactly one writer, named in its comment.
 *   - header: the agent, once, before the job starts; constant afterwards;
 *   - `request`, `request_posted_ns`: the agent (one agent per page);
 *   - everything else: the job (the thread that calls gandiva_step(), or, for
 *     the signal-time fields, the library's signal handlers through process-
 *     local state, never the page).
 * Concurrency: all mutable fields are lock-free 32/64-bit atomics (C++
 * std::atomic / C11 _Atomic, which have the same size, alignment and
 * representation on the supported compilers; the static asserts below check
 * it). Lock-free atomics are address-free, so they work across processes on
 * shared memory. Readers never block writers; see README.md for the read
 * protocol of the boundary ring.
 * Async-signal-safety: the inline helpers below are pure functions and are
 * async-signal-safe.
 *
 * Versioning: `version_major` changes when a field moves or changes meaning;
 * readers reject a page whose major differs. `version_minor` grows when fields
 * are added in reserved space or at the end; readers accept a higher minor
 * and ignore what they do not know.
 */
#ifndef GANDIVA_CLIENT_PROGRESS_PAGE_H_
#define GANDIVA_CLIENT_PROGRESS_PAGE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#include <atomic>
#define GANDIVA_ATOMIC(T) std::atomic<T>
#define GANDIVA_CAST(T, x) static_cast<T>(x)
#else
#include <stdatomic.h>
#define GANDIVA_ATOMIC(T) _Atomic(T)
#define GANDIVA_CAST(T, x) ((T)(x))
#endif

/* "GNDVPAGE" read as a little-endian 64-bit integer. */
#define GANDIVA_PAGE_MAGIC 0x4547415056444E47ULL
#define GANDIVA_PAGE_VERSION_MAJOR 1
#define GANDIVA_PAGE_VERSION_MINOR 2
/* Size of the file the agent creates (one page; the struct uses less). */
#define GANDIVA_PAGE_FILE_SIZE 4096
/* Timestamps of this many most recent mini-batch boundaries are kept. */
#define GANDIVA_PAGE_RING 16

/* What the job is doing (`state`). Written by the job only. */
enum gandiva_job_state {
  GANDIVA_STATE_NEW = 0,           /* page created, job not attached yet */
  GANDIVA_STATE_RUNNING = 1,       /* training; requests are served at step() */
  GANDIVA_STATE_SUSPENDING = 2,    /* at a boundary, running the offload hook */
  GANDIVA_STATE_SUSPENDED = 3,     /* offloaded; stopped (or about to stop) by
                                      raise(SIGSTOP); waits for SIGCONT */
  GANDIVA_STATE_RESUMING = 4,      /* continued, running the reload hook */
  GANDIVA_STATE_CHECKPOINTING = 5, /* saving for checkpoint-and-exit/resize */
  GANDIVA_STATE_EXITED = 6, /* left gandiva_step() for good; see exit_code */
  GANDIVA_STATE_WAITING = 7 /* (minor 1) warm start: the process is up and
                               waits for its checkpoint to arrive (see
                               GANDIVA_RESUME_READY_FILE) */
};

/* Warm start (minor 1). A job started with GANDIVA_RESUME_WAIT=1 waits, in
 * state WAITING, until the file GANDIVA_RESUME_READY_FILE exists in the
 * directory GANDIVA_RESUME_FROM names; the agent creates it once every file
 * of the checkpoint is in place. The job then stores restore_begin_ns, loads,
 * stores restore_end_ns and goes to RUNNING; its next boundary is its first
 * mini-batch after the move. */
#define GANDIVA_RESUME_READY_FILE ".gandiva-ready"

/* Warm start straight from the source. A job of one process that can read
 * its checkpoint from a socket writes GANDIVA_STREAM_OK_FILE in its
 * GANDIVA_RESUME_FROM directory before it waits: the name of the
 * checkpoint file it can take, one line. When the checkpoint to come is
 * that one file, the agent may, instead of receiving it, open the source
 * agent's bulk channel and write GANDIVA_STREAM_OFFER_FILE there before the
 * ready file: lines "host H", "port P", "token T" (the 32-byte token in
 * hex), "path NAME", "size BYTES", "streams N", then N lines "slice OFFSET
 * LENGTH": the contiguous part of the file stream i carries, in stream
 * order. The job then connects to H:P once per stream, sends the token
 * (and, when N > 1, the stream's index, 4 bytes big endian), reads the 8
 * bytes "GNDVBLK1" and then the slice's bytes, straight into its memory;
 * restore_begin_ns .. restore_end_ns then span the transfer and the load
 * together. A job that fails to take the stream exits (the agent reports
 * the move failed). */
#define GANDIVA_STREAM_OK_FILE ".gandiva-stream-ok"
#define GANDIVA_STREAM_OFFER_FILE ".gandiva-stream"
/* Optional, written by the job once the last byte of a stream arrived and
 * before restore_end_ns: "received_ns N" (CLOCK_MONOTONIC, the clock of the
 * page's timestamps), so that the agent can tell the transfer from the rest
 * of the load. */
#define GANDIVA_STREAM_DONE_FILE ".gandiva-stream-done"

/* Periodic checkpoints. A job started with GANDIVA_CHECKPOINT_EVERY_MINIBATCHES
 * (a count) or GANDIVA_CHECKPOINT_EVERY_S (seconds) saves a checkpoint into
 * GANDIVA_CHECKPOINT_DIR that often, at a boundary, by itself, and after each
 * save (file complete and renamed into place) writes GANDIVA_SAVED_FILE there
 * (temp file, then rename): lines "minibatches N" (the boundary it was saved
 * at), "path NAME" (the file, in that directory) and "mtime_ns M" (that
 * file's st_mtim in ns). When the job's process fails, the agent keeps that
 * checkpoint for its next run if the file's mtime still matches (a newer
 * save whose note did not follow makes it unknown: then none is kept). */
#define GANDIVA_SAVED_FILE ".gandiva-saved"

/* What the agent asks for (`request`). */
enum gandiva_request_kind {
  GANDIVA_REQUEST_NONE = 0,
  GANDIVA_REQUEST_SUSPEND = 1,         /* suspend at the next boundary */
  GANDIVA_REQUEST_CHECKPOINT_EXIT = 2, /* save, then exit 75 (migration) */
  GANDIVA_REQUEST_RESIZE = 3           /* save, then exit 76; arg = new world
                                          size the job will be restarted with */
};

/* Exit statuses of a job that left because the agent asked it to. */
#define GANDIVA_EXIT_MIGRATE 75 /* checkpoint-and-exit served */
#define GANDIVA_EXIT_RESIZE 76  /* resize served (checkpoint saved) */

/* The request word packs a sequence number, a kind and an argument so that
 * the agent publishes a request with one atomic store and the job can never
 * see a kind from one request with the sequence number of another:
 *   bits 63..32 seq (1, 2, ...; 0 = never requested)
 *   bits 31..24 kind (enum gandiva_request_kind)
 *   bits 23..0  arg  (target world size for RESIZE, else 0) */
#define GANDIVA_REQUEST_ARG_MAX 0xFFFFFFu

static inline uint64_t gandiva_request_pack(uint32_t seq, uint32_t kind,
                                            uint32_t arg) {
  uint64_t s = seq;
  uint64_t k = kind & 0xFFu;
  uint64_t a = arg & GANDIVA_REQUEST_ARG_MAX;
  return (s << 32) | (k << 24) | a;
}
static inline uint32_t gandiva_request_seq(uint64_t word) {
  return GANDIVA_CAST(uint32_t, word >> 32);
}
static inline uint32_t gandiva_request_kind_of(uint64_t word) {
  return GANDIVA_CAST(uint32_t, (word >> 24) & 0xFFu);
}
static inline uint32_t gandiva_request_arg(uint64_t word) {
  return GANDIVA_CAST(uint32_t, word & GANDIVA_REQUEST_ARG_MAX);
}

/* All times are CLOCK_MONOTONIC nanoseconds (0 = never). Offsets are fixed
 * (checked below) and part of the protocol. */
typedef struct gandiva_progress_page {
  /* ---- header (agent, once; offset 0) ---- */
  uint64_t magic;         /* GANDIVA_PAGE_MAGIC, written last at creation */
  uint16_t version_major; /* GANDIVA_PAGE_VERSION_MAJOR */
  uint16_t version_minor; /* GANDIVA_PAGE_VERSION_MINOR */
  uint32_t page_size;     /* sizeof(gandiva_progress_page) of the creator */
  uint64_t created_ns;    /* when the agent created the page */
  uint8_t reserved0[40];

  /* ---- agent -> job (agent writes; offset 64) ---- */
  GANDIVA_ATOMIC(uint64_t) request;           /* packed request word */
  GANDIVA_ATOMIC(uint64_t) request_posted_ns; /* stored before `request` */
  uint8_t reserved1[48];

  /* ---- job -> agent (job writes; offset 128) ---- */
  GANDIVA_ATOMIC(int32_t) pid;               /* the process to signal */
  GANDIVA_ATOMIC(uint32_t) state;            /* enum gandiva_job_state */
  GANDIVA_ATOMIC(uint64_t) attached_ns;      /* gandiva_init() mapped it */
  GANDIVA_ATOMIC(uint64_t) state_changed_ns; /* last write of `state` */
  /* Mini-batch boundaries passed (gandiva_step() calls), plus the count the
   * job declared with gandiva_set_minibatches() after a restore. Boundary j
   * (0-based; the j-th step() call) has its timestamp in
   * boundary_ns[j % GANDIVA_PAGE_RING], stored before `minibatches` = j + 1
   * is published (release). */
  GANDIVA_ATOMIC(uint64_t) minibatches;
  /* First boundary index usable for the rate: set after a resume (and a
   * restore) so that a window never spans time the job spent stopped. */
  GANDIVA_ATOMIC(uint64_t) rate_since;
  /* Requests from the request word: `ack_seq` = seq of the last one the job
   * took (it starts serving it), `done_seq` = seq of the last one finished
   * (took effect or failed; see last_result). A newer request posted before
   * the job reached a boundary replaces an older unserved one. */
  GANDIVA_ATOMIC(uint32_t) ack_seq;
  GANDIVA_ATOMIC(uint32_t) done_seq;
  /* The last request served, from the word or from a signal. These are
   * stored before `served_count` is incremented (release). */
  GANDIVA_ATOMIC(uint32_t) last_kind;  /* enum gandiva_request_kind */
  GANDIVA_ATOMIC(int32_t) last_result; /* 0 ok, else a GANDIVA_E_* code */
  GANDIVA_ATOMIC(uint64_t)
  last_received_ns;                           /* signal arrived, or step()
                                                 first saw the word */
  GANDIVA_ATOMIC(uint64_t) last_effective_ns; /* suspended / saved / failed */
  GANDIVA_ATOMIC(uint64_t) served_count;  /* requests finished, any origin */
  GANDIVA_ATOMIC(uint64_t) suspend_count; /* suspends taken effect */
  GANDIVA_ATOMIC(uint64_t)
  resumed_ns; /* last return to RUNNING after a
                 suspend (reload hook done) */
  GANDIVA_ATOMIC(int32_t)
  exit_code;                                  /* -1 while attached; 0 after
                                                 gandiva_shutdown(); 75/76 after a
                                                 served checkpoint-and-exit/resize */
  GANDIVA_ATOMIC(uint32_t) target_world_size; /* arg of the last RESIZE */
  /* (minor 1) Restore from a checkpoint: started (after the wait of a warm
   * start) and finished. 0 = no restore. */
  GANDIVA_ATOMIC(uint64_t) restore_begin_ns;
  GANDIVA_ATOMIC(uint64_t) restore_end_ns;
  uint8_t reserved2[8];

  /* ---- job -> agent: boundary ring (job writes; offset 256) ---- */
  GANDIVA_ATOMIC(uint64_t) boundary_ns[GANDIVA_PAGE_RING];

  /* ---- (minor 2) job -> agent: the job's metric (job writes; offset 384)
   * The last value the job reported with gandiva_report_metric() (a loss,
   * an accuracy: the job's choice) and its mini-batch count then. A
   * sequence lock: the job makes `metric_seq` odd, stores both, makes it
   * even (release); a reader reads the seq, both fields, the seq again,
   * and retries while it was odd or changed. Reports so far: seq / 2. */
  GANDIVA_ATOMIC(uint64_t) metric_seq;
  GANDIVA_ATOMIC(uint64_t) metric_bits; /* the IEEE-754 double's bits */
  GANDIVA_ATOMIC(uint64_t) metric_minibatches;
  uint8_t reserved3[40];
} gandiva_progress_page;

#ifdef __cplusplus
#define GANDIVA_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define GANDIVA_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

GANDIVA_STATIC_ASSERT(sizeof(GANDIVA_ATOMIC(uint64_t)) == 8 &&
                          sizeof(GANDIVA_ATOMIC(uint32_t)) == 4 &&
                          sizeof(GANDIVA_ATOMIC(int32_t)) == 4,
                      "atomics must have the size of their value type");
GANDIVA_STATIC_ASSERT(offsetof(gandiva_progress_page, request) == 64,
                      "layout: request");
GANDIVA_STATIC_ASSERT(offsetof(gandiva_progress_page, pid) == 128,
                      "layout: pid");
GANDIVA_STATIC_ASSERT(offsetof(gandiva_progress_page, minibatches) == 152,
                      "layout: minibatches");
GANDIVA_STATIC_ASSERT(offsetof(gandiva_progress_page, served_count) == 200,
                      "layout: served_count");
GANDIVA_STATIC_ASSERT(offsetof(gandiva_progress_page, exit_code) == 224,
                      "layout: exit_code");
GANDIVA_STATIC_ASSERT(offsetof(gandiva_progress_page, restore_begin_ns) == 232,
                      "layout: restore_begin_ns");
GANDIVA_STATIC_ASSERT(offsetof(gandiva_progress_page, boundary_ns) == 256,
                      "layout: boundary_ns");
GANDIVA_STATIC_ASSERT(offsetof(gandiva_progress_page, metric_seq) == 384,
                      "layout: metric_seq");
GANDIVA_STATIC_ASSERT(sizeof(gandiva_progress_page) == 448, "layout: size");
GANDIVA_STATIC_ASSERT(sizeof(gandiva_progress_page) <= GANDIVA_PAGE_FILE_SIZE,
                      "page must fit in the file");

#endif /* GANDIVA_CLIENT_PROGRESS_PAGE_H_ */
