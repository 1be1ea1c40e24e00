// NCCL communicator (see nccl_communicator.hpp).
#include "parallel/nccl_communicator.hpp"

#include <latte/error.hpp>

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

namespace latte::detail {

namespace {

void check_nccl(ncclResult_t result, const char* what) {
  if (result != ncclSuccess && result != ncclInProgress) {
    throw Error(ErrorCode::device, std::string("NCCL ") + what + ": " + ncclGetErrorString(result));
  }
}

void check_cuda(cudaError_t result, const char* what) {
  if (result != cudaSuccess)
    throw Error(ErrorCode::device, std::string("CUDA ") + what + ": " + cudaGetErrorString(result));
}

ncclDataType_t nccl_type(CollectiveType type) { return type == CollectiveType::f32 ? ncclFloat32 : ncclBfloat16; }

ncclComm_t as_comm(void* p) { return static_cast<ncclComm_t>(p); }
cudaStream_t as_stream(void* p) { return static_cast<cudaStream_t>(p); }

void* create_stream(int device) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  return stream;
}

}  // namespace

size_t NcclCommunicator::unique_id_size() noexcept { return sizeof(ncclUniqueId); }

std::vector<std::byte> NcclCommunicator::new_unique_id() {
  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::vector<std::byte> bytes(sizeof id);
  std::memcpy(bytes.data(), &id, sizeof id);
  return bytes;
}

NcclCommunicator::NcclCommunicator(std::span<const std::byte> unique_id, int rank, int world_size, int device)
    : rank_(rank), world_size_(world_size), device_(device) {
  if (unique_id.size() != sizeof(ncclUniqueId)) {
    throw Error(ErrorCode::invalid_argument, "an NCCL unique id is " + std::to_string(sizeof(ncclUniqueId)) +
                                                 " bytes, got " + std::to_string(unique_id.size()));
  }
  if (rank < 0 || rank >= world_size) {
    throw Error(ErrorCode::invalid_argument,
                "rank " + std::to_string(rank) + " outside a group of " + std::to_string(world_size));
  }
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof id);
  stream_ = create_stream(device);
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRank(&comm, world_size, id, rank);
  if (r != ncclSuccess) {
    cudaStreamDestroy(as_stream(stream_));
    check_nccl(r,
               ("ncclCommInitRank (rank " + std::to_string(rank) + " of " + std::to_string(world_size) + ")").c_str());
  }
  comm_.store(comm);
  queue_ = stream_;
}

NcclCommunicator::NcclCommunicator(Adopt, void* comm, int rank, int world_size, int device)
    : rank_(rank), world_size_(world_size), device_(device) {
  comm_.store(comm);
  stream_ = create_stream(device);
  queue_ = stream_;
}

NcclCommunicator::~NcclCommunicator() {
  if (void* comm = comm_.load()) {
    cudaSetDevice(device_);
    ncclCommDestroy(as_comm(comm));
  }
  if (stream_) cudaStreamDestroy(as_stream(stream_));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::from_environment(const LaunchEnvironment& env,
                                                                     std::chrono::milliseconds timeout) {
  int n_devices = 0;
  check_cuda(cudaGetDeviceCount(&n_devices), "cudaGetDeviceCount");
  if (env.local_rank < 0 || env.local_rank >= n_devices) {
    throw Error(ErrorCode::device, "local rank " + std::to_string(env.local_rank) + " (" + env.source +
                                       ") has no GPU: this host has " + std::to_string(n_devices));
  }
  // Every connection at ncclCommInitRank, while all ranks are present, rather than at the first
  // collective that needs it: a rank whose peer died later then waits in a kernel (which the step
  // watchdog's abort ends), never inside a host call connecting to the dead peer.
  ::setenv("NCCL_RUNTIME_CONNECT", "0", 0);
  std::vector<std::byte> id;
  if (env.rank == 0) {
    id = new_unique_id();
    publish_unique_id(env.id_file, id);
  } else {
    id = wait_for_unique_id(env.id_file, unique_id_size(), timeout);
  }
  return std::make_unique<NcclCommunicator>(id, env.rank, env.world_size, env.local_rank);
}

std::vector<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create_in_process(std::span<const int> devices) {
  const int n = static_cast<int>(devices.size());
  std::vector<ncclComm_t> comms(devices.size());
  check_nccl(ncclCommInitAll(comms.data(), n, devices.data()), "ncclCommInitAll");
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  for (int r = 0; r < n; ++r) {
    out.push_back(std::unique_ptr<NcclCommunicator>(
        new NcclCommunicator(Adopt{}, comms[static_cast<size_t>(r)], r, n, devices[static_cast<size_t>(r)])));
  }
  return out;
}

void NcclCommunicator::abort() noexcept {
  const std::lock_guard lock(calls_);
  void* comm = comm_.exchange(nullptr);
  if (!comm) return;
  cudaSetDevice(device_);
  ncclCommAbort(as_comm(comm));
}

std::string NcclCommunicator::async_error() const {
  const std::lock_guard lock(calls_);
  void* comm = comm_.load();
  if (!comm) return "";
  ncclResult_t async = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(as_comm(comm), &async);
  if (r != ncclSuccess) return std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(r);
  if (async != ncclSuccess && async != ncclInProgress) return ncclGetErrorString(async);
  return "";
}

void NcclCommunicator::all_reduce_sum(void* data, size_t count, CollectiveType type) {
  const std::lock_guard lock(calls_);
  void* comm = comm_.load();
  if (!comm) throw Error(ErrorCode::device, "NCCL all-reduce: the communicator was aborted");
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  check_nccl(ncclAllReduce(data, data, count, nccl_type(type), ncclSum, as_comm(comm), as_stream(queue_)),
             "ncclAllReduce");
}

void NcclCommunicator::all_gather(const void* send, void* recv, size_t count, CollectiveType type) {
  const std::lock_guard lock(calls_);
  void* comm = comm_.load();
  if (!comm) throw Error(ErrorCode::device, "NCCL all-gather: the communicator was aborted");
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  check_nccl(ncclAllGather(send, recv, count, nccl_type(type), as_comm(comm), as_stream(queue_)), "ncclAllGather");
}

void NcclCommunicator::broadcast(void* data, size_t count, CollectiveType type, int root) {
  if (root < 0 || root >= world_size_) {
    throw Error(ErrorCode::invalid_argument, "broadcast: root " + std::to_string(root) + " outside the group of " +
                                                 std::to_string(world_size_) + " ranks");
  }
  const std::lock_guard lock(calls_);
  void* comm = comm_.load();
  if (!comm) throw Error(ErrorCode::device, "NCCL broadcast: the communicator was aborted");
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  check_nccl(ncclBroadcast(data, data, count, nccl_type(type), root, as_comm(comm), as_stream(queue_)),
             "ncclBroadcast");
}

void NcclCommunicator::synchronize() {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  check_cuda(cudaStreamSynchronize(as_stream(queue_)), "cudaStreamSynchronize");
  const std::lock_guard lock(calls_);
  void* comm = comm_.load();
  if (!comm) throw Error(ErrorCode::device, "NCCL: the communicator was aborted");
  ncclResult_t async = ncclSuccess;
  check_nccl(ncclCommGetAsyncError(as_comm(comm), &async), "ncclCommGetAsyncError");
  check_nccl(async, "asynchronous error");
}

}  // namespace latte::detail
