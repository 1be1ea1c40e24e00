// Loading a model on a CUDA device from the CPU suite: a clear latte::Error whenever the device cannot
// be used (a build without CUDA, or no such device), never a crash.
#include "model/presets.hpp"
#include "model/random_model.hpp"

#include <latte/device.hpp>
#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>

#include <doctest/doctest.h>

#include <string>

TEST_CASE("loading on a CUDA device that cannot be used is an Error naming the device") {
  const auto bytes = latte::random_model_bytes(latte::model_preset("test-v2-lite"), {.seed = 5});
  const int devices = latte::Device::cuda_device_count();
  const int ordinal = devices + 3;  // never present
  try {
    (void)latte::Model::from_file(latte::gguf::File::from_bytes(bytes, "m.gguf"),
                                  {.device = latte::Device::cuda(ordinal)});
    FAIL("loading on a missing device should fail");
  } catch (const latte::Error& e) {
    const std::string message = e.what();
    INFO(message);
#ifdef LATTE_WITH_CUDA
    CHECK(e.code() == latte::ErrorCode::invalid_argument);
    CHECK(message.find("cuda:" + std::to_string(ordinal)) != std::string::npos);
    CHECK(message.find("does not exist") != std::string::npos);
#else
    CHECK(e.code() == latte::ErrorCode::unsupported);
    CHECK(message.find("built without CUDA") != std::string::npos);
#endif
  }
}

TEST_CASE("tensor parallelism over more CUDA devices than exist is an Error saying how many were found") {
  const auto bytes = latte::random_model_bytes(latte::model_preset("test-v2-lite"), {.seed = 5});
  const int devices = latte::Device::cuda_device_count();
  const int tp = devices + 2;  // at least 2 ranks, one more GPU than present
  try {
    (void)latte::Model::from_file(latte::gguf::File::from_bytes(bytes, "m.gguf"),
                                  {.device = latte::Device::cuda(0), .tensor_parallel = tp});
    FAIL("tensor_parallel beyond the CUDA devices present should fail");
  } catch (const latte::Error& e) {
    const std::string message = e.what();
    INFO(message);
#if defined(LATTE_WITH_CUDA)
    // the GPU count is checked before NCCL: with or without it, too few GPUs is the error
    CHECK(e.code() == latte::ErrorCode::invalid_argument);
    CHECK(message.find("tensor_parallel = " + std::to_string(tp)) != std::string::npos);
    CHECK(message.find(std::to_string(devices) + " CUDA device") != std::string::npos);
#else
    CHECK(e.code() == latte::ErrorCode::unsupported);
    CHECK(message.find("built without CUDA") != std::string::npos);
#endif
  }
}
