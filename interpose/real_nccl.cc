// detnccl shim: resolution of the real NCCL (see real_nccl.h).
#include "interpose/real_nccl.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string_view>

namespace detnccl::interpose {
namespace {

// The value a missing entry point returns, by return type.
template <class Ret>
Ret missing_result() noexcept;
template <>
ncclResult_t missing_result<ncclResult_t>() noexcept {
  return ncclInvalidUsage;
}
template <>
const char* missing_result<const char*>() noexcept {
  return "detnccl: this NCCL entry point is missing from the loaded NCCL library";
}

void warn_missing_once(std::atomic<bool>& warned, const char* name) noexcept {
  if (!warned.exchange(true, std::memory_order_relaxed)) {
    // RATIONALE: plain stderr, not the logger: this must work before (or without) any configuration.
    std::fprintf(stderr,
                 "[detnccl] WARNING: %s is not exported by the loaded NCCL (too old?) or NCCL is not loaded; "
                 "the call returns ncclInvalidUsage\n",
                 name);
  }
}

// Stubs: `resolve_then_X` resolves the table and calls again; `missing_X` stands in for an absent symbol.
// If NCCL is not loaded at all, the resolving stubs stay in place so that a later call retries.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define DETNCCL_STUBS(ret, name, params, args, kind, need)        \
  ret missing_##name params {                                     \
    static std::atomic<bool> warned{false};                       \
    warn_missing_once(warned, #name);                             \
    return missing_result<ret>();                                 \
  }                                                               \
  ret resolve_then_##name params {                                \
    resolve_real_nccl();                                          \
    auto real = DETNCCL_REAL(name);                               \
    if (real == &resolve_then_##name) return missing_##name args; \
    return real args;                                             \
  }
DETNCCL_NCCL_API(DETNCCL_STUBS)
#undef DETNCCL_STUBS
#pragma GCC diagnostic pop

constinit RealNccl g_real_nccl = {
#define DETNCCL_STUB_INIT(ret, name, params, args, kind, need) {&resolve_then_##name},
    DETNCCL_NCCL_API(DETNCCL_STUB_INIT)
#undef DETNCCL_STUB_INIT
};

// Finds `name` in the real NCCL, never in this shim.
void* find_real_symbol(const char* strong_name, const char* weak_name, void* own_address) noexcept {
  if (void* p = dlsym(RTLD_DEFAULT, strong_name)) return p;  // the shim never defines pnccl*
  if (void* p = dlsym(RTLD_NEXT, weak_name); p != nullptr && p != own_address) return p;
  // NCCL opened with RTLD_LOCAL (e.g. by a plugin loader) is invisible to the lookups above.
  if (void* handle = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD | RTLD_LOCAL)) {
    void* p = dlsym(handle, strong_name);
    if (p == nullptr) p = dlsym(handle, weak_name);
    dlclose(handle);  // RTLD_NOLOAD took a reference; the library stays loaded by its owner
    if (p != nullptr && p != own_address) return p;
  }
  return nullptr;
}

}  // namespace

RealNccl& real_nccl() noexcept { return g_real_nccl; }

bool real_nccl_has_group_simulate_end() noexcept {
  resolve_real_nccl();
  const auto real = g_real_nccl.ncclGroupSimulateEnd.load(std::memory_order_relaxed);
  return real != &missing_ncclGroupSimulateEnd && real != &resolve_then_ncclGroupSimulateEnd;
}

namespace {

// The executable segments of the library holding the real ncclCommGetAsyncError, found once it is resolved.
struct CodeRanges {
  std::uintptr_t begin[8] = {};
  std::uintptr_t end[8] = {};
  int count = 0;
};
std::atomic<const CodeRanges*> g_nccl_code{nullptr};

const CodeRanges* find_nccl_code() noexcept {
  static std::mutex finding;
  const std::lock_guard<std::mutex> lock(finding);
  if (const CodeRanges* found = g_nccl_code.load(std::memory_order_acquire)) return found;
  resolve_real_nccl();
  const auto real = reinterpret_cast<std::uintptr_t>(g_real_nccl.ncclCommGetAsyncError.load(std::memory_order_relaxed));
  Dl_info info{}, self{};
  if (dladdr(reinterpret_cast<const void*>(real), &info) == 0 || info.dli_fbase == nullptr) return nullptr;
  // Not resolved yet (the pointer is still one of the shim's stubs): nothing to cache, NCCL may load later.
  if (dladdr(reinterpret_cast<const void*>(&find_nccl_code), &self) != 0 && self.dli_fbase == info.dli_fbase) {
    return nullptr;
  }
  static CodeRanges ranges;  // RATIONALE: written once under the lock, then only read
  struct Search {
    const void* base;
    CodeRanges* ranges;
  } search{info.dli_fbase, &ranges};
  dl_iterate_phdr(
      [](dl_phdr_info* object, std::size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        bool holds_base = false;
        for (int i = 0; i < object->dlpi_phnum; ++i) {
          const ElfW(Phdr)& header = object->dlpi_phdr[i];
          const std::uintptr_t start = object->dlpi_addr + header.p_vaddr;
          if (header.p_type == PT_LOAD && start <= reinterpret_cast<std::uintptr_t>(s->base) &&
              reinterpret_cast<std::uintptr_t>(s->base) < start + header.p_memsz) {
            holds_base = true;
          }
        }
        if (!holds_base) return 0;
        for (int i = 0; i < object->dlpi_phnum && s->ranges->count < 8; ++i) {
          const ElfW(Phdr)& header = object->dlpi_phdr[i];
          if (header.p_type != PT_LOAD || (header.p_flags & PF_X) == 0) continue;
          s->ranges->begin[s->ranges->count] = object->dlpi_addr + header.p_vaddr;
          s->ranges->end[s->ranges->count] = object->dlpi_addr + header.p_vaddr + header.p_memsz;
          ++s->ranges->count;
        }
        return 1;
      },
      &search);
  if (ranges.count == 0) return nullptr;
  g_nccl_code.store(&ranges, std::memory_order_release);
  return &ranges;
}

}  // namespace

bool inside_real_nccl(const void* code) noexcept {
  const CodeRanges* ranges = g_nccl_code.load(std::memory_order_acquire);
  if (ranges == nullptr && (ranges = find_nccl_code()) == nullptr) return false;
  const auto address = reinterpret_cast<std::uintptr_t>(code);
  for (int i = 0; i < ranges->count; ++i) {
    if (ranges->begin[i] <= address && address < ranges->end[i]) return true;
  }
  return false;
}

bool resolve_real_nccl() noexcept {
  static std::mutex resolving;
  const std::lock_guard<std::mutex> lock(resolving);
  // First look everything up, then publish: all or nothing, so that "NCCL not loaded yet" leaves the stubs.
  struct Found {
#define DETNCCL_FOUND_SLOT(ret, name, params, args, kind, need) void* name;
    DETNCCL_NCCL_API(DETNCCL_FOUND_SLOT)
#undef DETNCCL_FOUND_SLOT
  } found{};
  int required_total = 0;
  int required_found = 0;
#define DETNCCL_LOOKUP(ret, name, params, args, kind, need)                                                      \
  found.name = find_real_symbol("p" #name, #name, reinterpret_cast<void*>(static_cast<ret(*) params>(&::name))); \
  if (std::string_view(#need) == "REQUIRED") {                                                                   \
    ++required_total;                                                                                            \
    required_found += found.name != nullptr;                                                                     \
  }
  DETNCCL_NCCL_API(DETNCCL_LOOKUP)
#undef DETNCCL_LOOKUP
  if (required_found == 0) return false;  // no NCCL in the process (yet)
#define DETNCCL_PUBLISH(ret, name, params, args, kind, need)                                                    \
  g_real_nccl.name.store(found.name != nullptr ? reinterpret_cast<ret(*) params>(found.name) : &missing_##name, \
                         std::memory_order_relaxed);
  DETNCCL_NCCL_API(DETNCCL_PUBLISH)
#undef DETNCCL_PUBLISH
  return required_found == required_total;
}

}  // namespace detnccl::interpose
