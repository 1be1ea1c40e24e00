// Two processes on one host, one GPU each, bootstrapped exactly as two hosts would be: rank 0
// publishes the NCCL unique id to LATTE_TP_ID_FILE, rank 1 reads it, and both check all-reduce
// (fp32 and bf16), all-gather and broadcast against sums computed on the host. Run without
// LATTE_TP_RANK, the program launches the two ranks itself (and first checks the in-process
// bootstrap, one thread per GPU); with LATTE_TP_RANK / OMPI_COMM_WORLD_RANK / PMI_RANK set it is one
// rank of a launch made by someone else (mpirun -np 2, or two shells). Exit 77: fewer than 2 GPUs.
#include "parallel/launch_environment.hpp"
#include "parallel/nccl_communicator.hpp"

#include "launch_ranks.hpp"

#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <cuda_runtime.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using latte::detail::CollectiveType;
using latte::detail::NcclCommunicator;

/// Rank r's input value i: distinct per rank and element, reproducible in every process.
float input_value(int rank, size_t i, uint32_t seed) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ (static_cast<uint32_t>(rank) + 1) * 40503u ^ seed;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return static_cast<float>(x % 20001u) / 1000.0f - 10.0f;
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw latte::Error(latte::ErrorCode::device, std::string(what) + ": " + cudaGetErrorString(e));
}

/// Runs every collective on `comm` and checks it; returns the number of mismatches.
int check_collectives(NcclCommunicator& comm, uint32_t seed) {
  const int world = comm.world_size(), rank = comm.rank();
  const size_t n = (size_t{1} << 20) + 7;
  check_cuda(cudaSetDevice(comm.device()), "cudaSetDevice");
  int bad = 0;

  // fp32 all-reduce: compared exactly for 2 ranks (one addition, commutative), else within 1e-6.
  std::vector<float> host(n), expected(n, 0.0f);
  for (size_t i = 0; i < n; ++i) host[i] = input_value(rank, i, seed);
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < n; ++i) expected[i] += input_value(r, i, seed);
  }
  float* dev = nullptr;
  check_cuda(cudaMalloc(&dev, n * sizeof(float) * static_cast<size_t>(world)), "cudaMalloc");
  check_cuda(cudaMemcpy(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  comm.all_reduce_sum(dev, n, CollectiveType::f32);
  comm.synchronize();
  check_cuda(cudaMemcpy(host.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (size_t i = 0; i < n; ++i) {
    const float tol = world == 2 ? 0.0f : 1e-6f * (std::abs(expected[i]) + 10.0f * static_cast<float>(world));
    if (!(std::abs(host[i] - expected[i]) <= tol) && bad++ < 5) {
      std::fprintf(stderr, "rank %d: fp32 all-reduce [%zu] = %g, expected %g\n", rank, i, host[i], expected[i]);
    }
  }

  // bf16 all-reduce: the sum of the bf16 inputs, within one bf16 rounding (2^-8 relative) plus input rounding.
  std::vector<uint16_t> half(n);
  for (size_t i = 0; i < n; ++i) half[i] = latte::fp32_to_bf16(input_value(rank, i, seed));
  check_cuda(cudaMemcpy(dev, half.data(), n * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  comm.all_reduce_sum(dev, n, CollectiveType::bf16);
  comm.synchronize();
  check_cuda(cudaMemcpy(half.data(), dev, n * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (size_t i = 0; i < n; ++i) {
    float ref = 0.0f;
    for (int r = 0; r < world; ++r) ref += latte::bf16_to_fp32(latte::fp32_to_bf16(input_value(r, i, seed)));
    const float got = latte::bf16_to_fp32(half[i]);
    if (!(std::abs(got - ref) <= std::ldexp(std::abs(ref), -7) + 1e-6f) && bad++ < 5) {
      std::fprintf(stderr, "rank %d: bf16 all-reduce [%zu] = %g, expected %g\n", rank, i, got, ref);
    }
  }

  // all-gather into a NaN-poisoned buffer, then broadcast from the last rank.
  for (size_t i = 0; i < n; ++i) host[i] = input_value(rank, i, seed ^ 0xabcdu);
  float* send = nullptr;
  check_cuda(cudaMalloc(&send, n * sizeof(float)), "cudaMalloc");
  check_cuda(cudaMemcpy(send, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  check_cuda(cudaMemset(dev, 0xff, n * sizeof(float) * static_cast<size_t>(world)), "cudaMemset");
  comm.all_gather(send, dev, n, CollectiveType::f32);
  comm.broadcast(send, n, CollectiveType::f32, world - 1);
  comm.synchronize();
  std::vector<float> gathered(n * static_cast<size_t>(world));
  check_cuda(cudaMemcpy(gathered.data(), dev, gathered.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  check_cuda(cudaMemcpy(host.data(), send, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < n; ++i) {
      if (gathered[static_cast<size_t>(r) * n + i] != input_value(r, i, seed ^ 0xabcdu) && bad++ < 5) {
        std::fprintf(stderr, "rank %d: all-gather [%d][%zu] wrong\n", rank, r, i);
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (host[i] != input_value(world - 1, i, seed ^ 0xabcdu) && bad++ < 5) {
      std::fprintf(stderr, "rank %d: broadcast [%zu] wrong\n", rank, i);
    }
  }
  cudaFree(send);
  cudaFree(dev);
  return bad;
}

int run_rank(const latte::detail::LaunchEnvironment& env) {
  const char* seed_text = std::getenv("LATTE_TP_TEST_SEED");
  const uint32_t seed = seed_text ? static_cast<uint32_t>(std::strtoul(seed_text, nullptr, 10)) : 12345u;
  auto comm = NcclCommunicator::from_environment(env);
  const int bad = check_collectives(*comm, seed);
  std::printf("rank %d of %d (%s, GPU %d): %s\n", env.rank, env.world_size, env.source.c_str(), comm->device(),
              bad ? "FAILED" : "all collectives match");
  return bad ? 1 : 0;
}

int launch_two_ranks(const char* self) {
  const auto dir = std::filesystem::temp_directory_path() / ("latte-nccl-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string id_file = (dir / "nccl-id").string();
  const uint32_t seed = static_cast<uint32_t>(std::random_device{}());
  std::printf("launching 2 ranks, id file %s, seed %u\n", id_file.c_str(), seed);
  const int failed = latte::test::launch_ranks(self, 2, id_file, {"LATTE_TP_TEST_SEED=" + std::to_string(seed)});
  std::filesystem::remove_all(dir);
  return failed ? 1 : 0;
}

}  // namespace

int main(int, char** argv) {
  try {
    if (auto env = latte::detail::read_launch_environment()) return run_rank(*env);
    int n_devices = 0;
    if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices < 2) {
      std::printf("skipped: needs 2 GPUs, found %d\n", n_devices);
      return 77;
    }
    // In-process bootstrap: one thread per GPU over ncclCommInitAll.
    const int devices[] = {0, 1};
    auto comms = NcclCommunicator::create_in_process(devices);
    int bad[2] = {0, 0};
    std::thread t([&] { bad[1] = check_collectives(*comms[1], 777u); });
    bad[0] = check_collectives(*comms[0], 777u);
    t.join();
    std::printf("in-process (2 threads, 2 GPUs): %s\n", bad[0] + bad[1] ? "FAILED" : "all collectives match");
    comms.clear();
    const int launched = launch_two_ranks(argv[0]);
    return bad[0] + bad[1] + launched ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
