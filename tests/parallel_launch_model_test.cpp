// Loading one rank of a tensor-parallel model per process (ModelParams::tensor_parallel_from_launch):
// the checks that run before anything is read, through fake launch variables and through Model::load.
// The load itself needs GPUs and NCCL: tests/gpu/nccl/tp_launch_model_test.cpp.
#include "model/presets.hpp"
#include "model/random_model.hpp"
#include "parallel/launch_model.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>

#include <doctest/doctest.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace {

using latte::detail::resolve_model_launch;

std::function<const char*(const char*)> fake_env(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

/// The message and code of the Error `f` throws ("no error" when it throws none).
std::pair<std::string, latte::ErrorCode> error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const latte::Error& e) {
    return {e.what(), e.code()};
  }
  return {"no error", latte::ErrorCode::internal};
}

/// Launch variables of rank `rank` of `world`, GPU `local`; an empty id file leaves LATTE_TP_ID_FILE unset.
std::map<std::string, std::string> launch_vars(const char* rank, const char* world, const char* local,
                                               const char* id_file = "/tmp/id") {
  std::map<std::string, std::string> vars{
      {"LATTE_TP_RANK", rank}, {"LATTE_TP_WORLD", world}, {"LATTE_TP_LOCAL_RANK", local}};
  if (*id_file) vars.emplace("LATTE_TP_ID_FILE", id_file);
  return vars;
}

const std::map<std::string, std::string> kTwoRanks = launch_vars("1", "2", "1");

}  // namespace

TEST_CASE("a launched rank takes its degree and GPU from the launch variables") {
  SUBCASE("tensor_parallel left at 1: the launch's world size") {
    const auto launch = resolve_model_launch({.device = latte::Device::cuda(0), .tensor_parallel_from_launch = true},
                                             fake_env(kTwoRanks));
    CHECK(launch.tensor_parallel == 2);
    CHECK(launch.env.rank == 1);
    CHECK(launch.env.id_file == "/tmp/id");
    CHECK(launch.device == latte::Device::cuda(1));
  }
  SUBCASE("tensor_parallel equal to the world size; the local rank picks the GPU, not the given index") {
    const auto launch = resolve_model_launch(
        {.device = latte::Device::cuda(2), .tensor_parallel = 4, .tensor_parallel_from_launch = true},
        fake_env(launch_vars("1", "4", "3")));
    CHECK(launch.tensor_parallel == 4);
    CHECK(launch.device == latte::Device::cuda(3));
  }
  SUBCASE("Open MPI's variables, local rank from OMPI_COMM_WORLD_LOCAL_RANK") {
    const auto launch = resolve_model_launch({.device = latte::Device::cuda(0), .tensor_parallel_from_launch = true},
                                             fake_env({{"OMPI_COMM_WORLD_RANK", "5"},
                                                       {"OMPI_COMM_WORLD_SIZE", "8"},
                                                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                       {"LATTE_TP_ID_FILE", "/shared/id"}}));
    CHECK(launch.tensor_parallel == 8);
    CHECK(launch.env.rank == 5);
    CHECK(launch.device == latte::Device::cuda(1));
  }
}

TEST_CASE("an unusable launch fails with an error naming what is wrong") {
  const latte::ModelParams cuda_params{.device = latte::Device::cuda(0), .tensor_parallel_from_launch = true};
  SUBCASE("no launch variables") {
    const auto [what, code] = error_of([&] { resolve_model_launch(cuda_params, fake_env({})); });
    CHECK(code == latte::ErrorCode::invalid_argument);
    CHECK(what.find("no launch environment") != std::string::npos);
    CHECK(what.find("LATTE_TP_RANK") != std::string::npos);
    CHECK(what.find("LATTE_TP_ID_FILE") != std::string::npos);
  }
  SUBCASE("tensor_parallel other than the world size") {
    auto params = cuda_params;
    params.tensor_parallel = 4;
    const auto [what, code] = error_of([&] { resolve_model_launch(params, fake_env(kTwoRanks)); });
    CHECK(code == latte::ErrorCode::invalid_argument);
    CHECK(what.find("tensor_parallel = 4") != std::string::npos);
    CHECK(what.find("has 2 processes") != std::string::npos);
  }
  SUBCASE("a CPU device, checked before the variables") {
    auto params = cuda_params;
    params.device = latte::Device::cpu();
    const auto [what, code] = error_of([&] { resolve_model_launch(params, fake_env(kTwoRanks)); });
    CHECK(code == latte::ErrorCode::invalid_argument);
    CHECK(what.find("device cpu is not a CUDA device") != std::string::npos);
  }
  SUBCASE("a malformed variable is named") {
    const auto [what, code] =
        error_of([&] { resolve_model_launch(cuda_params, fake_env(launch_vars("one", "2", "1"))); });
    CHECK(code == latte::ErrorCode::invalid_argument);
    CHECK(what.find("LATTE_TP_RANK='one'") != std::string::npos);
  }
  SUBCASE("a world of several processes without an id file") {
    const auto [what, code] =
        error_of([&] { resolve_model_launch(cuda_params, fake_env(launch_vars("1", "2", "1", ""))); });
    CHECK(what.find("LATTE_TP_ID_FILE is not set") != std::string::npos);
  }
  SUBCASE("a negative local rank") {
    const auto [what, code] =
        error_of([&] { resolve_model_launch(cuda_params, fake_env(launch_vars("1", "2", "-1"))); });
    CHECK(code == latte::ErrorCode::invalid_argument);
    CHECK(what.find("local rank -1") != std::string::npos);
  }
}

TEST_CASE("Model::load with tensor_parallel_from_launch refuses a CPU device and a missing launch") {
  const auto bytes = latte::random_model_bytes(latte::model_preset("test-v2-lite"));
  auto load = [&](latte::ModelParams params) {
    return error_of([&] { latte::Model::from_file(latte::gguf::File::from_bytes(bytes), std::move(params)); });
  };
  {
    const auto [what, code] = load({.device = latte::Device::cpu(), .tensor_parallel_from_launch = true});
    CHECK(code == latte::ErrorCode::invalid_argument);
    CHECK(what.find("tensor_parallel_from_launch: device cpu is not a CUDA device") != std::string::npos);
  }
  // The real environment: only meaningful when this test is not itself run as a launched rank.
  if (!std::getenv("LATTE_TP_RANK") && !std::getenv("OMPI_COMM_WORLD_RANK") && !std::getenv("PMI_RANK")) {
    const auto [what, code] = load({.device = latte::Device::cuda(0), .tensor_parallel_from_launch = true});
    CHECK(code == latte::ErrorCode::invalid_argument);
    CHECK(what.find("no launch environment") != std::string::npos);
  }
  // Without the flag the launch variables are not consulted: a plain CPU load.
  CHECK_NOTHROW(latte::Model::from_file(latte::gguf::File::from_bytes(bytes), {}));
}
