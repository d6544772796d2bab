// Strongly typed identifiers for jobs, servers, GPUs and actions.
//
// Ids are dense small integers handed out by whoever creates the object (the
// world for jobs and servers, the scheduler for actions), so the core can keep
// its tables in vectors. Plain values: thread-compatible.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>

namespace gandiva::core {

template <typename Tag, typename Rep = int32_t>
struct Id {
  Rep value = -1;

  constexpr Id() = default;
  constexpr explicit Id(Rep v) : value(v) {}
  constexpr bool valid() const { return value >= 0; }
  constexpr auto operator<=>(const Id&) const = default;
};

using JobId = Id<struct JobTag, int32_t>;
using ServerId = Id<struct ServerTag, int32_t>;
// A GPU's cluster-wide index; GPUs of one server are contiguous.
using GpuId = Id<struct GpuTag, int32_t>;
using ActionId = Id<struct ActionTag, int64_t>;

}  // namespace gandiva::core

template <typename Tag, typename Rep>
struct std::hash<gandiva::core::Id<Tag, Rep>> {
  size_t operator()(const gandiva::core::Id<Tag, Rep>& id) const noexcept {
    return std::hash<Rep>()(id.value);
  }
};
