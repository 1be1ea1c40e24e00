// The multi-process launch path without GPUs: rank/world variables of each launcher, and the
// unique-id file exchange between a publishing rank 0 and waiting ranks.
#include "parallel/launch_environment.hpp"
#include "support/temp_dir.hpp"

#include <latte/error.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>

namespace {

std::function<const char*(const char*)> fake_env(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const latte::Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("launch variables: explicit, Open MPI and PMI, with errors naming the variable") {
  using latte::detail::read_launch_environment;
  CHECK_FALSE(read_launch_environment(fake_env({})).has_value());
  auto env = read_launch_environment(
      fake_env({{"LATTE_TP_RANK", "1"}, {"LATTE_TP_WORLD", "2"}, {"LATTE_TP_ID_FILE", "/shared/id"}}));
  REQUIRE(env);
  CHECK(env->rank == 1);
  CHECK(env->world_size == 2);
  CHECK(env->local_rank == 1);
  CHECK(env->id_file == "/shared/id");
  env = read_launch_environment(fake_env({{"OMPI_COMM_WORLD_RANK", "5"},
                                          {"OMPI_COMM_WORLD_SIZE", "8"},
                                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                          {"LATTE_TP_ID_FILE", "/shared/id"}}));
  REQUIRE(env);
  CHECK(env->rank == 5);
  CHECK(env->local_rank == 1);
  CHECK(env->source == "Open MPI");
  env = read_launch_environment(
      fake_env({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "3"}, {"LATTE_TP_ID_FILE", "x"}}));
  REQUIRE(env);
  CHECK(env->source == "PMI");
  CHECK(error_text([] {
          (void)read_launch_environment(
              fake_env({{"LATTE_TP_RANK", "2"}, {"LATTE_TP_WORLD", "2"}, {"LATTE_TP_ID_FILE", "x"}}));
        }).find("LATTE_TP_RANK=2 is outside [0, 2)") != std::string::npos);
  CHECK(error_text([] {
          (void)read_launch_environment(fake_env({{"LATTE_TP_RANK", "0"}, {"LATTE_TP_WORLD", "two"}}));
        }).find("LATTE_TP_WORLD='two'") != std::string::npos);
  CHECK(error_text([] {
          (void)read_launch_environment(fake_env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}));
        }).find("LATTE_TP_ID_FILE is not set") != std::string::npos);
}

TEST_CASE("ranks waiting on the id file receive exactly the bytes rank 0 publishes") {
  latte::test::TempDir dir;
  const std::string path = dir.file("nccl-id");
  std::vector<std::byte> id(128);
  std::mt19937 rng(std::random_device{}());
  for (auto& b : id) b = static_cast<std::byte>(rng());
  std::vector<std::vector<std::byte>> got(3);
  std::vector<std::thread> waiters;
  for (int r = 0; r < 3; ++r) {
    waiters.emplace_back([&, r] {
      got[static_cast<size_t>(r)] =
          latte::detail::wait_for_unique_id(path, id.size(), std::chrono::milliseconds(10000));
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  latte::detail::publish_unique_id(path, id);
  for (auto& t : waiters) t.join();
  for (const auto& g : got) CHECK(g == id);

  const std::string missing = error_text(
      [&] { (void)latte::detail::wait_for_unique_id(dir.file("never"), 128, std::chrono::milliseconds(60)); });
  CHECK(missing.find("never") != std::string::npos);
  CHECK(missing.find("rank 0") != std::string::npos);
  latte::detail::publish_unique_id(dir.file("short"), std::span(id).first(20));
  CHECK(error_text([&] {
          (void)latte::detail::wait_for_unique_id(dir.file("short"), 128, std::chrono::milliseconds(60));
        }).find("holds 20 bytes") != std::string::npos);
}
