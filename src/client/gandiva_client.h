/* The job-side gandiva library: the C ABI through which a training job tells
 * its node agent where its mini-batch boundaries are, and lets the agent
 * suspend it, resume it, and make it checkpoint and exit (for a migration or
 * a resize) at such a boundary. Usable from C, C++ and Python (ctypes).
 * The protocol is described in src/client/README.md; the shared memory
 * layout is client/progress_page.h.
 *
 * Typical use:
 *   gandiva_set_hooks(offload, reload, save, load, &my_state);
 *   gandiva_init();                 // no-op outside gandiva
 *   gandiva_restore();              // loads GANDIVA_RESUME_FROM if set
 *                                   // (waits for it on a warm start)
 *   for (;;) { train_one_minibatch(); gandiva_step(); }
 *   gandiva_shutdown();
 *
 * Thread-safety: gandiva_init(), gandiva_set_hooks(), gandiva_restore*(),
 * gandiva_step*(), gandiva_checkpoint_done(), gandiva_set_minibatches() and
 * gandiva_shutdown() are called from one thread (the training thread), never
 * concurrently. The getters (gandiva_minibatches(), gandiva_active(),
 * gandiva_*_dir() ...) may be called from any thread. The gandiva_page_*()
 * agent-side helpers are thread-safe (each call maps the page on its own).
 * Async-signal-safety: none of these functions is async-signal-safe except
 * gandiva_minibatches(). The signal handlers the library installs (SIGTSTP,
 * SIGUSR1) are async-signal-safe: they only store to lock-free atomics and
 * read CLOCK_MONOTONIC.
 * Errors are returned as values (GANDIVA_E_*); no exception or longjmp ever
 * crosses this ABI, and hooks must not throw through it either.
 */
#ifndef GANDIVA_CLIENT_GANDIVA_CLIENT_H_
#define GANDIVA_CLIENT_GANDIVA_CLIENT_H_

#include <stdint.h>

#include "client/progress_page.h"

#if defined(__GNUC__)
#define GANDIVA_API __attribute__((visibility("default")))
#else
#define GANDIVA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- result codes ---- */
#define GANDIVA_OK 0
#define GANDIVA_INACTIVE                                                   \
  1                       /* gandiva_init(): no GANDIVA_PROGRESS_FILE; the \
                             library is a no-op that only counts steps */
#define GANDIVA_E_IO (-1) /* open/ftruncate/mmap failed (see errno) */
#define GANDIVA_E_BAD_PAGE (-2) /* wrong magic, major version or size */
#define GANDIVA_E_SIGNAL (-3)   /* installing a signal handler failed */
#define GANDIVA_E_HOOK (-4)     /* a hook returned non-zero */
#define GANDIVA_E_NO_CHECKPOINT_DIR (-5) /* checkpoint asked, no directory */
#define GANDIVA_E_STATE (-6)             /* call not valid now */
#define GANDIVA_E_INVALID (-7)           /* bad argument */

/* ---- gandiva_step() results (>= 0; < 0 is a GANDIVA_E_* code) ---- */
#define GANDIVA_STEP_CONTINUE 0 /* nothing happened; train on */
#define GANDIVA_STEP_RESUMED                    \
  1 /* was suspended inside this call (offload, \
       stop, SIGCONT, reload); train on */
#define GANDIVA_STEP_CHECKPOINT                  \
  2 /* a checkpoint-and-exit or resize request   \
       is pending and no save hook is set: save  \
       under gandiva_checkpoint_dir(), then call \
       gandiva_checkpoint_done() and exit with   \
       the status it returns */

/* gandiva_step_flags() flags. */
#define GANDIVA_STEP_COUNT_ONLY              \
  1u /* count and timestamp the boundary but \
        leave pending requests for the next  \
        step (used when a loop is left early) */

/* Hooks. Return 0 on success, non-zero on failure. `user_data` is the pointer
 * given to gandiva_set_hooks(). `path` is the checkpoint directory (save:
 * GANDIVA_CHECKPOINT_DIR; load: GANDIVA_RESUME_FROM). */
typedef int (*gandiva_hook_fn)(void* user_data);
typedef int (*gandiva_checkpoint_fn)(const char* path, void* user_data);

/* Reads the environment (GANDIVA_JOB_ID, GANDIVA_PROGRESS_FILE,
 * GANDIVA_CHECKPOINT_DIR, GANDIVA_RESUME_FROM), maps the progress page,
 * installs the SIGTSTP and SIGUSR1 handlers, and publishes pid and
 * state=RUNNING. Returns GANDIVA_OK (attached), GANDIVA_INACTIVE (no
 * GANDIVA_PROGRESS_FILE: no-op mode, no handlers installed) or a GANDIVA_E_*
 * code (the library then stays inactive). Idempotent: later calls return the
 * first call's result. After a failure, gandiva_shutdown() lets init retry. */
GANDIVA_API int gandiva_init(void);

/* Registers the hooks (any may be NULL). Call before training starts.
 *   offload: at a suspend, before stopping (move device state to host);
 *   reload:  after SIGCONT, before training goes on;
 *   save:    at a checkpoint-and-exit/resize: write everything needed to
 *            continue into the directory `path`. With a save hook, a served
 *            request ends the process inside gandiva_step() with exit(75) or
 *            exit(76); without one, gandiva_step() returns
 *            GANDIVA_STEP_CHECKPOINT and the caller saves;
 *   load:    called by gandiva_restore() with GANDIVA_RESUME_FROM. */
GANDIVA_API void gandiva_set_hooks(gandiva_hook_fn offload,
                                   gandiva_hook_fn reload,
                                   gandiva_checkpoint_fn save,
                                   gandiva_checkpoint_fn load, void* user_data);

/* If GANDIVA_RESUME_FROM is set, calls the load hook with it, between
 * gandiva_restore_begin(-1) and gandiva_restore_end(). Returns 1 if a
 * checkpoint was loaded, 0 if there is none to load, GANDIVA_E_STATE if one
 * is set but no load hook is registered (or gandiva_init() was not called),
 * GANDIVA_E_HOOK if the hook failed. */
GANDIVA_API int gandiva_restore(void);

/* The two halves of a restore, for jobs that load the checkpoint themselves
 * (call after gandiva_init(), before the first gandiva_step()):
 *   if (gandiva_restore_begin(-1) == 1) {
 *     load(gandiva_resume_from());
 *     gandiva_restore_end();
 *   }
 * gandiva_restore_begin(): returns 0 if GANDIVA_RESUME_FROM is unset
 * (nothing to load). With GANDIVA_RESUME_WAIT=1 (a warm start: the process
 * was started before its checkpoint arrived) it publishes state WAITING and
 * waits until the file GANDIVA_RESUME_READY_FILE exists in the
 * GANDIVA_RESUME_FROM directory, polling every 2 ms, for at most timeout_ms
 * (< 0: forever); GANDIVA_E_STATE on timeout (state back to RUNNING) or
 * before gandiva_init(). Then stores restore_begin_ns, publishes state
 * RESUMING (loading) and returns 1: load now. Also works when inactive (no
 * page: only the wait).
 * gandiva_restore_end(): after the load; stores restore_end_ns, restarts the
 * rate window at the current count (call gandiva_set_minibatches() first)
 * and publishes state RUNNING. No-op unless gandiva_restore_begin() returned
 * 1 since. */
GANDIVA_API int gandiva_restore_begin(int timeout_ms);
GANDIVA_API void gandiva_restore_end(void);

/* Call at every mini-batch boundary (after a mini-batch's optimizer step,
 * before the next one starts). Counts and timestamps the boundary, then
 * serves at most one pending request (checkpoint-and-exit/resize before
 * suspend). Exception: when a suspend was served and, once continued, a
 * checkpoint-and-exit or resize is pending (posted or signalled while the
 * job was stopped), it is served in the same call, so the checkpoint is
 * taken at the boundary where the job stopped. Returns a GANDIVA_STEP_* value
 * or a GANDIVA_E_* code (a hook failed or no checkpoint directory; the job
 * keeps running and the agent sees the failure in last_result). Outside gandiva
 * it only counts. */
GANDIVA_API int gandiva_step(void);
GANDIVA_API int gandiva_step_flags(unsigned flags);

/* After GANDIVA_STEP_CHECKPOINT: report the caller's save. result 0 = saved:
 * publishes state=EXITED with the exit status and returns that status
 * (GANDIVA_EXIT_MIGRATE or GANDIVA_EXIT_RESIZE), which the caller must exit
 * with promptly. result != 0 = save failed: publishes the failure, state goes
 * back to RUNNING, returns 0 (train on). Returns GANDIVA_E_STATE if no
 * checkpoint was pending. */
GANDIVA_API int gandiva_checkpoint_done(int result);

/* Mini-batch boundaries passed (also counted in no-op mode). */
GANDIVA_API uint64_t gandiva_minibatches(void);
/* Declares the count after a restore (so the agent sees total progress);
 * call before the first gandiva_step(). */
GANDIVA_API void gandiva_set_minibatches(uint64_t count);

/* Reports the job's metric (a loss, an accuracy: the job's choice, e.g. for
 * a hyper-parameter search to compare jobs by): the agent sees the last
 * value reported and the mini-batch count then (`gandiva ls`, `gandiva
 * show`). GANDIVA_OK, or GANDIVA_E_STATE when not attached (nothing to report
 * to). */
GANDIVA_API int gandiva_report_metric(double value);

/* 1 if attached to a progress page, else 0. */
GANDIVA_API int gandiva_active(void);
/* Environment as read by gandiva_init(); NULL when unset. The strings live
 * until gandiva_shutdown(). */
GANDIVA_API const char* gandiva_job_id(void);
GANDIVA_API const char* gandiva_checkpoint_dir(void);
GANDIVA_API const char* gandiva_resume_from(void);
/* Target world size of the last resize request served (0 if none). */
GANDIVA_API uint32_t gandiva_target_world_size(void);

/* Publishes state=EXITED, exit_code=0 (unless an exit status was already
 * published), restores the previous signal handlers and unmaps the page.
 * Also run at exit() if the job forgets. Safe to call when inactive. */
GANDIVA_API void gandiva_shutdown(void);

/* Name of a GANDIVA_* result code, e.g. "GANDIVA_E_HOOK". */
GANDIVA_API const char* gandiva_strerror(int code);

/* ---- agent-side helpers (for tools, tests and Python; the C++ agent uses
 * client/progress_reader.h) ---- */

/* A consistent-enough copy of a page (each field read atomically). */
typedef struct gandiva_page_info {
  uint32_t version_major;
  uint32_t version_minor;
  int32_t pid;
  uint32_t state; /* enum gandiva_job_state */
  uint64_t minibatches;
  uint64_t last_boundary_ns; /* 0 if no boundary yet */
  double rate;               /* mini-batches/s over the window; 0 if unknown */
  uint32_t rate_window;      /* boundaries the rate was computed over */
  uint32_t request_seq;      /* seq of the last request the agent posted */
  uint32_t ack_seq;
  uint32_t done_seq;
  uint32_t last_kind;
  int32_t last_result;
  uint64_t last_received_ns;
  uint64_t last_effective_ns;
  uint64_t served_count;
  uint64_t suspend_count;
  uint64_t resumed_ns;
  int32_t exit_code;
  uint32_t target_world_size;
  uint64_t restore_begin_ns; /* page minor >= 1; else 0 */
  uint64_t restore_end_ns;
} gandiva_page_info;

/* Creates (or truncates) the page file at `path` with mode 0600 and an empty
 * page (state NEW). Returns GANDIVA_OK or GANDIVA_E_IO. */
GANDIVA_API int gandiva_page_create(const char* path);
/* Reads the page at `path` into *out. GANDIVA_OK, GANDIVA_E_IO,
 * GANDIVA_E_BAD_PAGE or GANDIVA_E_INVALID (NULL argument). */
GANDIVA_API int gandiva_page_read(const char* path, gandiva_page_info* out);
/* The last metric the job reported (gandiva_report_metric): *reports = 0
 * when none (or the job's library predates page minor 2). GANDIVA_OK,
 * GANDIVA_E_IO, GANDIVA_E_BAD_PAGE or GANDIVA_E_INVALID (a NULL argument). */
GANDIVA_API int gandiva_page_read_metric(const char* path, double* value,
                                         uint64_t* minibatches,
                                         uint64_t* reports);
/* Posts a request (enum gandiva_request_kind, arg <= GANDIVA_REQUEST_ARG_MAX)
 * with the next sequence number; returns the sequence number (> 0) or a
 * GANDIVA_E_* code. Only one agent may post to a page. */
GANDIVA_API int64_t gandiva_page_request(const char* path, uint32_t kind,
                                         uint32_t arg);
/* CLOCK_MONOTONIC now, in ns (the clock of every page timestamp). */
GANDIVA_API uint64_t gandiva_monotonic_ns(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GANDIVA_CLIENT_GANDIVA_CLIENT_H_ */
