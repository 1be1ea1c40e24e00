# `latte sampler-bench`: runs every chain on a small vocabulary and reports a timing for each.
latte_cli_test(NAME sampler_bench_runs ARGS sampler-bench --vocab 4096 --iterations 5
               EXPECT_STDOUT "vocab 4096.*greedy.*median.*temperature only.*median")
latte_cli_test(NAME sampler_bench_rejects_zero_iterations ARGS sampler-bench --iterations 0
               EXPECT_EXIT 1 EXPECT_STDERR "--iterations must be a positive integer, got .0.")
