// cuda/'s driver-side headers against the stand-in driver (tests/fake_cuda_driver.cc, loaded as libcuda.so.1):
//   - context_scope.h: a scope restores exactly the context the thread had, none included, and never touches a device
//     it was not asked for.
//   - kernel_preload.h: every kernel is loaded once into each device's context it is asked for (lazy loading loads
//     per context), the thread's context is left as it was, and a failure is retried rather than remembered.
//   - driver_version.h: the driver's version is read from cuDriverGetVersion, and a driver of an older major release
//     than the shim's runtime is refused with both versions named.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

#include "cuda/context_scope.h"
#include "cuda/driver_version.h"
#include "cuda/kernel_preload.h"

namespace {

using detnccl::cuda::ContextDriver;
using detnccl::cuda::ContextScope;

// The stand-in driver, loaded once before the scope first looks libcuda.so.1 up; its recorded facts.
struct FakeDriver {
  FakeDriver() {
    library = dlopen(DETNCCL_FAKE_CUDA_DRIVER, RTLD_NOW | RTLD_GLOBAL);
    if (library == nullptr) return;
    created = reinterpret_cast<bool (*)(int)>(dlsym(library, "fake_cuda_primary_created"));
    ever_current = reinterpret_cast<bool (*)(int)>(dlsym(library, "fake_cuda_ever_current"));
    references = reinterpret_cast<int (*)(int)>(dlsym(library, "fake_cuda_primary_references"));
    function_loads = reinterpret_cast<int (*)(int, const void*)>(dlsym(library, "fake_cuda_function_loads"));
  }
  void* library = nullptr;
  bool (*created)(int) = nullptr;
  bool (*ever_current)(int) = nullptr;
  int (*references)(int) = nullptr;
  int (*function_loads)(int, const void*) = nullptr;  // cuFuncLoad calls for a function on a device
};

const FakeDriver& fake() {
  static const FakeDriver driver;
  return driver;
}

void* current_context() {
  void* context = reinterpret_cast<void*>(1);
  EXPECT_EQ(ContextDriver::loaded().get_current(&context), 0);
  return context;
}

int current_device() {
  int device = -1;
  return ContextDriver::loaded().context_device(&device) == 0 ? device : -1;
}

template <typename Body>
void on_fresh_thread(Body body) {
  std::thread thread(body);
  thread.join();
}

class DeviceScope : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(fake().library, nullptr) << dlerror();
    ASSERT_TRUE(ContextDriver::loaded().complete()) << "the stand-in driver lacks an entry point the scope calls";
  }
};

// The collector thread's case: no current context before, none after, and GPU 0 never touched (the bug restored
// "device 0", creating its primary context). Device 0 is used by no other test of this file.
TEST_F(DeviceScope, ThreadWithNoContextIsLeftWithNoneAndDeviceZeroUntouched) {
  on_fresh_thread([] {
    ASSERT_EQ(current_context(), nullptr);
    {
      ContextScope scope;
      ASSERT_EQ(scope.enter(1), 0);
      EXPECT_EQ(current_device(), 1);
      EXPECT_NE(current_context(), nullptr);
      EXPECT_EQ(fake().references(1), 1);
    }
    EXPECT_EQ(current_context(), nullptr);
    EXPECT_EQ(current_device(), -1);
  });
  EXPECT_EQ(fake().references(1), 0) << "the scope must release the primary context it retained";
  EXPECT_FALSE(fake().created(0));
  EXPECT_FALSE(fake().ever_current(0));
}

TEST_F(DeviceScope, AnotherDevicesContextIsRestored) {
  on_fresh_thread([] {
    ContextScope job;  // the job's own context on device 2
    ASSERT_EQ(job.enter(2), 0);
    void* const jobs = current_context();
    {
      ContextScope scope;
      ASSERT_EQ(scope.enter(3), 0);
      EXPECT_EQ(current_device(), 3);
    }
    EXPECT_EQ(current_context(), jobs);
    EXPECT_EQ(current_device(), 2);
  });
  EXPECT_FALSE(fake().created(0));
}

TEST_F(DeviceScope, TheRightDeviceIsLeftAlone) {
  on_fresh_thread([] {
    ContextScope job;
    ASSERT_EQ(job.enter(3), 0);
    const int references = fake().references(3);
    {
      ContextScope scope;
      ASSERT_EQ(scope.enter(3), 0);
      EXPECT_EQ(fake().references(3), references) << "no second retain when the device is already current";
    }
    EXPECT_EQ(current_device(), 3);
  });
}

TEST_F(DeviceScope, FailureLeavesTheThreadAsItWas) {
  on_fresh_thread([] {
    {
      ContextScope scope;
      EXPECT_EQ(scope.enter(17), 101);  // CUDA_ERROR_INVALID_DEVICE
    }
    EXPECT_EQ(current_context(), nullptr);
    ContextScope without_driver;
    EXPECT_EQ(without_driver.enter(1, ContextDriver{}), ContextScope::kNotInitialized);
    EXPECT_EQ(current_context(), nullptr);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// kernel_preload.h. Stand-in kernels: addresses of distinct objects; the stand-in resolver hands each back as its
// function in the current context, as cudaGetFuncBySymbol hands back the context's CUfunction. Device 0 stays unused.

using detnccl::cuda::KernelLoadDriver;
using detnccl::cuda::KernelPreloads;

const char kKernelBytes[3] = {};
const void* const kKernels[] = {&kKernelBytes[0], &kKernelBytes[1], &kKernelBytes[2]};

std::atomic<int> g_resolved{0};
std::atomic<int> g_resolve_status{0};  // what the stand-in resolver answers
int resolve_stand_in(void** function, const void* kernel) {
  ++g_resolved;
  *function = const_cast<void*>(kernel);
  return g_resolve_status.load();
}

// Loads of each stand-in kernel on `device` so far, all equal (else -1).
int loads_of_each_kernel(int device) {
  const int first = fake().function_loads(device, kKernels[0]);
  for (const void* kernel : kKernels) {
    if (fake().function_loads(device, kernel) != first) return -1;
  }
  return first;
}

class KernelPreload : public DeviceScope {
 protected:
  void SetUp() override {
    DeviceScope::SetUp();
    ASSERT_NE(fake().function_loads, nullptr);
    ASSERT_NE(KernelLoadDriver::loaded().func_load, nullptr) << "the stand-in driver lacks cuFuncLoad";
    g_resolve_status = 0;
  }
};

TEST_F(KernelPreload, EveryKernelIsLoadedOnceIntoEachDeviceAskedFor) {
  KernelPreloads preloads;
  const int before[4] = {loads_of_each_kernel(0), loads_of_each_kernel(1), loads_of_each_kernel(2),
                         loads_of_each_kernel(3)};
  on_fresh_thread([&] {
    EXPECT_EQ(preloads.preload(1, kKernels, resolve_stand_in), 0);
    EXPECT_EQ(current_context(), nullptr) << "the thread had no context and must be left with none";
    EXPECT_EQ(preloads.preload(1, kKernels, resolve_stand_in), 0);  // done already: nothing loaded again
    EXPECT_EQ(preloads.preload(2, kKernels, resolve_stand_in), 0);
  });
  EXPECT_EQ(loads_of_each_kernel(1), before[1] + 1) << "one load per kernel into device 1's context";
  EXPECT_EQ(loads_of_each_kernel(2), before[2] + 1) << "a device of its own is loaded on its own";
  EXPECT_EQ(loads_of_each_kernel(3), before[3]) << "a device not asked for is not touched";
  EXPECT_EQ(loads_of_each_kernel(0), before[0]);
  EXPECT_TRUE(preloads.loaded_on(1));
  EXPECT_TRUE(preloads.loaded_on(2));
  EXPECT_FALSE(preloads.loaded_on(3));
  EXPECT_FALSE(fake().created(0));
  EXPECT_EQ(fake().references(1), 0) << "the preload must release the primary context it retained";
}

TEST_F(KernelPreload, TheThreadsOwnContextOnAnotherDeviceIsRestored) {
  KernelPreloads preloads;
  const int before = loads_of_each_kernel(3);
  on_fresh_thread([&] {
    ContextScope job;  // the job's context on device 2
    ASSERT_EQ(job.enter(2), 0);
    void* const jobs = current_context();
    EXPECT_EQ(preloads.preload(3, kKernels, resolve_stand_in), 0);
    EXPECT_EQ(current_context(), jobs);
    EXPECT_EQ(current_device(), 2);
  });
  EXPECT_EQ(loads_of_each_kernel(3), before + 1) << "loaded into device 3's context, not the current one's";
}

TEST_F(KernelPreload, AFailureIsNotRememberedAsDone) {
  KernelPreloads preloads;
  const int before = loads_of_each_kernel(1);
  on_fresh_thread([&] {
    g_resolve_status = 200;  // CUDA_ERROR_INVALID_IMAGE, say
    EXPECT_EQ(preloads.preload(1, kKernels, resolve_stand_in), 200);
    EXPECT_FALSE(preloads.loaded_on(1));
    EXPECT_EQ(current_context(), nullptr);
    g_resolve_status = 0;
    EXPECT_EQ(preloads.preload(1, kKernels, resolve_stand_in), 0) << "tried again at the next call";
    EXPECT_TRUE(preloads.loaded_on(1));
    EXPECT_EQ(preloads.preload(-1, kKernels, resolve_stand_in), KernelPreloads::kInvalidDevice);
    EXPECT_EQ(preloads.preload(2, kKernels, resolve_stand_in, ContextDriver{}), ContextScope::kNotInitialized);
    EXPECT_FALSE(preloads.loaded_on(2));
  });
  EXPECT_EQ(loads_of_each_kernel(1), before + 1);
}

// ---------------------------------------------------------------------------------------------------------------
// driver_version.h

TEST(DriverVersion, TheLoadedDriverSaysItsVersionAndAnOlderMajorReleaseIsRefused) {
  // The first question to the driver in this process: its answer is then remembered.
  ASSERT_EQ(setenv("FAKE_CUDA_DRIVER_VERSION", "12040", 1), 0);
  ASSERT_NE(fake().library, nullptr) << dlerror();
  EXPECT_EQ(detnccl::cuda::loaded_driver_version(), 12040);

  EXPECT_TRUE(detnccl::cuda::driver_too_old(12040, 13000));
  EXPECT_TRUE(detnccl::cuda::driver_too_old(12090, 13000));
  EXPECT_FALSE(detnccl::cuda::driver_too_old(13000, 13000)) << "minor version compatibility: any 13.x driver";
  EXPECT_FALSE(detnccl::cuda::driver_too_old(13020, 13000));
  EXPECT_FALSE(detnccl::cuda::driver_too_old(-1, 13000)) << "no driver loaded says nothing yet";
  EXPECT_FALSE(detnccl::cuda::driver_too_old(9000, 0)) << "a build without device code needs no driver";

  const std::string text = detnccl::cuda::driver_too_old_text(12040, 13000);
  EXPECT_NE(text.find("version 12.4"), std::string::npos) << text;
  EXPECT_NE(text.find("needs 13.0 or newer"), std::string::npos) << text;
  EXPECT_NE(text.find("branch 580"), std::string::npos) << text;
}

}  // namespace
