// cuda/context_scope.h against the stand-in driver (tests/fake_cuda_driver.cc, loaded as libcuda.so.1): a scope
// restores exactly the context the thread had, none included, and never touches a device it was not asked for.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <thread>

#include "cuda/context_scope.h"

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
  }
  void* library = nullptr;
  bool (*created)(int) = nullptr;
  bool (*ever_current)(int) = nullptr;
  int (*references)(int) = nullptr;
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

}  // namespace
