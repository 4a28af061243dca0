// hostnccl's staging of CUDA buffers (hostnccl/device_staging.h) against the stand-in driver
// (tests/fake_cuda_driver.cc, loaded as libcuda.so.1 before the communicator is made): pinned host memory is read
// and written in the stream's order, like device memory, and a grouped call reads its input at ncclGroupEnd, where
// NCCL enqueues its kernel. A "kernel still running" is a pending write the stand-in lands only when the stream's
// earlier work completes.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "abi/nccl_abi.h"

namespace {

struct FakeDriver {
  FakeDriver() {
    library = dlopen(DETNCCL_FAKE_CUDA_DRIVER, RTLD_NOW | RTLD_GLOBAL);
    if (library == nullptr) return;
    register_host = reinterpret_cast<void (*)(void*, std::size_t)>(dlsym(library, "fake_cuda_register_host"));
    enqueue_fill =
        reinterpret_cast<void (*)(void*, void*, std::size_t, unsigned char)>(dlsym(library, "fake_cuda_enqueue_fill"));
    stream_copies = reinterpret_cast<int (*)()>(dlsym(library, "fake_cuda_stream_copies"));
    synchronize = reinterpret_cast<int (*)(void*)>(dlsym(library, "cuStreamSynchronize"));
  }
  void* library = nullptr;
  void (*register_host)(void*, std::size_t) = nullptr;
  void (*enqueue_fill)(void*, void*, std::size_t, unsigned char) = nullptr;
  int (*stream_copies)() = nullptr;
  int (*synchronize)(void*) = nullptr;
};

class HostncclStaging : public ::testing::Test {
 protected:
  static constexpr std::size_t kBytes = 256;

  void SetUp() override {
    ASSERT_NE(fake.library, nullptr) << dlerror();
    ASSERT_NE(fake.register_host, nullptr);
    ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);  // looks the (stand-in) driver up
  }
  void TearDown() override {
    if (comm != nullptr) ncclCommDestroy(comm);
  }

  // `bytes` of memory the driver knows as pinned host memory, holding `value`.
  unsigned char* pinned(unsigned char value) {
    buffers.emplace_back(kBytes, value);
    fake.register_host(buffers.back().data(), kBytes);
    return buffers.back().data();
  }

  static bool all_equal(const unsigned char* data, unsigned char value) {
    for (std::size_t i = 0; i < kBytes; ++i) {
      if (data[i] != value) return false;
    }
    return true;
  }

  FakeDriver fake;
  ncclComm_t comm = nullptr;
  std::vector<std::vector<unsigned char>> buffers;  // reserved below: registered addresses must not move
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(0x5700);
};

// A kernel still writing a pinned send buffer: the reduction must see what it writes (the copy waits on the stream).
TEST_F(HostncclStaging, PinnedInputIsReadInStreamOrder) {
  buffers.reserve(4);
  unsigned char* send = pinned(1);
  std::vector<unsigned char> recv(kBytes, 0);
  fake.enqueue_fill(stream, send, kBytes, 7);
  const int copies = fake.stream_copies();
  ASSERT_EQ(ncclAllReduce(send, recv.data(), kBytes, ncclUint8, ncclSum, comm, stream), ncclSuccess);
  EXPECT_TRUE(all_equal(recv.data(), 7)) << "read before the stream's earlier write: " << int(recv[0]);
  EXPECT_GT(fake.stream_copies(), copies);
}

// A kernel enqueued before the call writing a pinned receive buffer: the result must land after it, not be
// overwritten by it.
TEST_F(HostncclStaging, PinnedOutputIsWrittenInStreamOrder) {
  buffers.reserve(4);
  std::vector<unsigned char> send(kBytes, 3);
  unsigned char* recv = pinned(0);
  fake.enqueue_fill(stream, recv, kBytes, 5);
  ASSERT_EQ(ncclAllReduce(send.data(), recv, kBytes, ncclUint8, ncclSum, comm, stream), ncclSuccess);
  fake.synchronize(stream);
  EXPECT_TRUE(all_equal(recv, 3)) << "the stream's earlier write landed over the result: " << int(recv[0]);
}

// Inside a group NCCL enqueues its kernel at ncclGroupEnd: work enqueued on the stream between the call and
// ncclGroupEnd comes before it, so the input must be read there, not at the call.
TEST_F(HostncclStaging, GroupedInputIsReadAtGroupEnd) {
  buffers.reserve(4);
  unsigned char* send = pinned(1);
  std::vector<unsigned char> recv(kBytes, 0);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(send, recv.data(), kBytes, ncclUint8, ncclSum, comm, stream), ncclSuccess);
  fake.enqueue_fill(stream, send, kBytes, 9);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_TRUE(all_equal(recv.data(), 9)) << "read at the call, not at ncclGroupEnd: " << int(recv[0]);
}

// Plain host memory (the driver does not know it) is still read directly: no stream copy.
TEST_F(HostncclStaging, PlainHostMemoryIsNotStaged) {
  buffers.reserve(4);
  pinned(0);  // the stand-in now answers "not CUDA's" for everything else
  std::vector<unsigned char> send(kBytes, 4), recv(kBytes, 0);
  const int copies = fake.stream_copies();
  ASSERT_EQ(ncclAllReduce(send.data(), recv.data(), kBytes, ncclUint8, ncclSum, comm, stream), ncclSuccess);
  EXPECT_TRUE(all_equal(recv.data(), 4));
  EXPECT_EQ(fake.stream_copies(), copies);
}

}  // namespace
