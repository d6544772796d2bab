// Fuzzes the event log's codec (runtime/scheduler/event_codec.h): any text
// is either refused by DecodeEvent with INVALID_ARGUMENT, or decoded into
// an event that encodes, decodes again and encodes to the same text (what
// the daemon replays after a crash is what it logged). Anything else (and
// any crash, exception or sanitizer report) stops the run.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/scheduler/event_codec.h"

namespace {

[[noreturn]] void Fail(const std::string& what, const std::string& text) {
  std::fprintf(stderr, "fuzz_event_codec: %s\n  %s\n", what.c_str(),
               text.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using gandiva::runtime::DecodeEvent;
  using gandiva::runtime::EncodeEvent;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto first = DecodeEvent(text);
  if (!first.ok()) {
    if (first.status().code() != gandiva::core::StatusCode::kInvalidArgument) {
      Fail("refused with other than INVALID_ARGUMENT: " +
               first.status().ToString(),
           text);
    }
    return 0;
  }
  const std::string encoded = EncodeEvent(*first);
  auto again = DecodeEvent(encoded);
  if (!again.ok()) {
    Fail("what EncodeEvent wrote does not decode: " + again.status().ToString(),
         encoded);
  }
  if (const std::string re = EncodeEvent(*again); re != encoded) {
    Fail("not the same after a round trip: " + re, encoded);
  }
  return 0;
}
