/* Checks that the C ABI compiles as C11 and works without an agent: with no
 * GANDIVA_PROGRESS_FILE the library is a no-op that counts steps. Also
 * creates a page through the agent helpers and reads it back. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "client/gandiva_client.h"

_Static_assert(offsetof(gandiva_progress_page, boundary_ns) == 256,
               "layout as seen from C");

#define EXPECT(cond)                                                     \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                          \
    }                                                                    \
  } while (0)

int main(void) {
  unsetenv("GANDIVA_PROGRESS_FILE");
  EXPECT(gandiva_init() == GANDIVA_INACTIVE);
  EXPECT(gandiva_active() == 0);
  for (int i = 0; i < 3; ++i) EXPECT(gandiva_step() == GANDIVA_STEP_CONTINUE);
  EXPECT(gandiva_minibatches() == 3);
  EXPECT(gandiva_restore() == 0);
  gandiva_shutdown();

  char path[] = "/tmp/gandiva_c_abi_XXXXXX";
  int fd = mkstemp(path);
  EXPECT(fd >= 0);
  close(fd);
  EXPECT(gandiva_page_create(path) == GANDIVA_OK);
  gandiva_page_info info;
  EXPECT(gandiva_page_read(path, &info) == GANDIVA_OK);
  EXPECT(info.version_major == GANDIVA_PAGE_VERSION_MAJOR);
  EXPECT(info.state == GANDIVA_STATE_NEW);
  EXPECT(gandiva_page_request(path, GANDIVA_REQUEST_SUSPEND, 0) == 1);
  EXPECT(gandiva_page_request(path, GANDIVA_REQUEST_RESIZE, 4) == 2);
  EXPECT(gandiva_page_request(path, 99, 0) == GANDIVA_E_INVALID);
  EXPECT(gandiva_page_read(path, &info) == GANDIVA_OK);
  EXPECT(info.request_seq == 2);
  unlink(path);
  puts("c abi ok");
  return 0;
}
