// Starts this executable again as ranks 0 .. world-1 of a multi-process launch on this host, exactly as
// two hosts would start (rank r on GPU r, the NCCL id through `id_file`), and waits for them.
//
//   int failed = latte::test::launch_ranks(argv[0], 2, dir + "/nccl-id", {"LATTE_TP_TEST_SEED=7"});
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

extern char** environ;

namespace latte::test {

/// Each rank's environment is this process's plus the LATTE_TP_* launch variables and `extra`
/// ("NAME=value"). Returns the number of ranks that did not exit with status 0 (each one reported on
/// stderr), or 1 when a rank could not be started.
inline int launch_ranks(const char* self, int world, const std::string& id_file, const std::vector<std::string>& extra) {
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> vars;
    for (char** e = environ; *e; ++e) vars.emplace_back(*e);
    vars.push_back("LATTE_TP_RANK=" + std::to_string(r));
    vars.push_back("LATTE_TP_WORLD=" + std::to_string(world));
    vars.push_back("LATTE_TP_LOCAL_RANK=" + std::to_string(r));
    vars.push_back("LATTE_TP_ID_FILE=" + id_file);
    vars.insert(vars.end(), extra.begin(), extra.end());
    std::vector<char*> envp;
    for (auto& v : vars) envp.push_back(v.data());
    envp.push_back(nullptr);
    std::string arg0 = self;
    char* argv[] = {arg0.data(), nullptr};
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) {
      std::fprintf(stderr, "cannot start rank %d\n", r);
      return 1;
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (size_t r = 0; r < pids.size(); ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "rank %zu failed (status %d)\n", r, status);
      ++failed;
    }
  }
  return failed;
}

}  // namespace latte::test
