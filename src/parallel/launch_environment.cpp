// Launch variables and the unique-id file (see launch_environment.hpp).
#include "parallel/launch_environment.hpp"

#include <latte/error.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

namespace latte::detail {

namespace {

int parse_int(const char* name, const char* value) {
  try {
    size_t used = 0;
    const int v = std::stoi(value, &used);
    if (used == std::string(value).size()) return v;
  } catch (const std::exception&) {
  }
  throw Error(ErrorCode::invalid_argument, std::string(name) + "='" + value + "' is not an integer");
}

}  // namespace

std::optional<LaunchEnvironment> read_launch_environment(const std::function<const char*(const char*)>& getenv_fn) {
  auto get = [&](const char* name) -> const char* {
    const char* v = getenv_fn ? getenv_fn(name) : std::getenv(name);
    return v && *v ? v : nullptr;
  };
  struct Names {
    const char *rank, *world, *local, *source;
  };
  static constexpr Names kLaunchers[] = {
      {"LATTE_TP_RANK", "LATTE_TP_WORLD", "LATTE_TP_LOCAL_RANK", "LATTE_TP"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI"},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "PMI"},
  };
  for (const Names& n : kLaunchers) {
    const char* rank = get(n.rank);
    if (!rank) continue;
    const char* world = get(n.world);
    if (!world) throw Error(ErrorCode::invalid_argument, std::string(n.rank) + " is set but " + n.world + " is not");
    LaunchEnvironment env{.rank = parse_int(n.rank, rank), .world_size = parse_int(n.world, world), .source = n.source};
    if (env.world_size < 1) {
      throw Error(ErrorCode::invalid_argument, std::string(n.world) + "=" + world + ": needs at least 1 process");
    }
    if (env.rank < 0 || env.rank >= env.world_size) {
      throw Error(ErrorCode::invalid_argument,
                  std::string(n.rank) + "=" + rank + " is outside [0, " + std::to_string(env.world_size) + ")");
    }
    const char* local = get(n.local);
    env.local_rank = local ? parse_int(n.local, local) : env.rank;
    const char* id_file = get("LATTE_TP_ID_FILE");
    if (!id_file && env.world_size > 1) {
      throw Error(ErrorCode::invalid_argument, "LATTE_TP_ID_FILE is not set: the ranks of a " +
                                                   std::to_string(env.world_size) + "-process launch (" + n.source +
                                                   ") exchange the NCCL id through that file");
    }
    env.id_file = id_file ? id_file : "";
    return env;
  }
  return std::nullopt;
}

void publish_unique_id(const std::string& path, std::span<const std::byte> id) {
  const std::string tmp = path + ".tmp" + std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(id.data()), static_cast<std::streamsize>(id.size()));
    out.flush();
    if (!out) throw Error(ErrorCode::io, "cannot write the NCCL unique id to " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error(ErrorCode::io, "cannot rename " + tmp + " to " + path + ": " + ec.message());
}

std::vector<std::byte> wait_for_unique_id(const std::string& path, size_t size, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::error_code ec;
    const auto n = std::filesystem::file_size(path, ec);
    if (!ec) {
      if (n != size) {
        throw Error(ErrorCode::invalid_file, path + " holds " + std::to_string(n) + " bytes, an NCCL unique id is " +
                                                 std::to_string(size) + " (a stale or foreign file?)");
      }
      std::vector<std::byte> id(size);
      std::ifstream in(path, std::ios::binary);
      in.read(reinterpret_cast<char*>(id.data()), static_cast<std::streamsize>(size));
      if (in.gcount() == static_cast<std::streamsize>(size)) return id;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(ErrorCode::device, "no NCCL unique id appeared in " + path + " within " +
                                         std::to_string(timeout.count()) + " ms (is rank 0 running?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace latte::detail
