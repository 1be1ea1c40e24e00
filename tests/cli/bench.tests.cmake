# `latte bench` on a small random-weight test-v3 model (written by the cli_model fixture of
# model.tests.cmake): the table, --json, and clear errors for bad arguments. Tiny -p / -n keep it fast.
set(_bench_model ${CMAKE_CURRENT_BINARY_DIR}/cli-test-v3.gguf)

latte_cli_test(NAME bench_table
               ARGS bench --model ${_bench_model} -p 8 -n 4 -d 0,6 --batch 1,3 -r 1 --threads 1
                    --attention mla,standard
               EXPECT_STDOUT "copy bandwidth: [0-9.]+ GB/s.*\\| model +\\| +size \\| +params \\| device +\\| attention \\| test .*\\| +t/s \\| +floor t/s \\| floor % \\|\n\\|[-|: ]+\\|\n\\| deepseek2 [^\n]*\\| cpu +\\| mla +\\| pp8 +\\| +[0-9.]+ ± [0-9.]+ \\| +[0-9.]+ \\| +[0-9.]+% \\|\n[^\n]*\\| mla +\\| tg4 +\\|[^\n]*\n[^\n]*\\| mla +\\| pp8 @ d6 +\\|[^\n]*\n[^\n]*\\| mla +\\| tg4 @ d6 +\\|[^\n]*\n[^\n]*\\| mla +\\| pp8\\+tg4 x3 +\\|[^\n]*\n[^\n]*\\| standard +\\| pp8 +\\|.*\\| standard +\\| pp8\\+tg4 x3 +\\|")
add_test(NAME cli_bench_json
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:latte-cli> -DMODEL=${_bench_model}
                 -P ${CMAKE_CURRENT_LIST_DIR}/check_bench_json.cmake)
set_tests_properties(cli_bench_json PROPERTIES LABELS cli)

# --tp 1,2 on the CPU (in-process ranks): rows per degree, then one scaling line per test.
latte_cli_test(NAME bench_tp_scaling
               ARGS bench --model ${_bench_model} -p 8 -n 4 -r 1 --threads 2 --attention mla --tp 1,2
               EXPECT_STDOUT "\\| cpu +\\| mla +\\| pp8 +\\|.*\\| cpu x2 +\\| mla +\\| pp8 +\\|.*\\| cpu x2 +\\| mla +\\| tg4 +\\|.*scaling mla +pp8 +TP=2 \\(expert-parallel MoE\\) [0-9.]+ t/s / TP=1 [0-9.]+ t/s: speedup [0-9.]+x, efficiency [0-9]+%\nscaling mla +tg4 +TP=2")
latte_cli_test(NAME bench_tp_bad_moe ARGS bench --model ${_bench_model} --tp 2 --tp-moe rows EXPECT_EXIT 1
               EXPECT_STDERR "--tp-moe: expert or tensor, got 'rows'")
latte_cli_test(NAME bench_no_model ARGS bench -p 8 EXPECT_EXIT 1 EXPECT_STDERR "bench: --model is required")
latte_cli_test(NAME bench_bad_prompt ARGS bench --model ${_bench_model} -p 8,x EXPECT_EXIT 1
               EXPECT_STDERR "-p: 'x' is not an integer")
latte_cli_test(NAME bench_negative_gen ARGS bench --model ${_bench_model} -n -2 EXPECT_EXIT 1
               EXPECT_STDERR "-n: -2 is below the minimum 0")
latte_cli_test(NAME bench_zero_batch ARGS bench --model ${_bench_model} --batch 0 EXPECT_EXIT 1
               EXPECT_STDERR "--batch: 0 is below the minimum 1")
latte_cli_test(NAME bench_zero_reps ARGS bench --model ${_bench_model} -r 0 EXPECT_EXIT 1
               EXPECT_STDERR "-r: 0 is below the minimum 1")
latte_cli_test(NAME bench_nothing_to_run ARGS bench --model ${_bench_model} -p 0 -n 0 EXPECT_EXIT 1
               EXPECT_STDERR "-p and -n are all 0: nothing to run")
latte_cli_test(NAME bench_context_overflow ARGS bench --model ${_bench_model} -p 16 -n 4 -d 2147483640 EXPECT_EXIT 1
               EXPECT_STDERR "-d and -p \\(2147483640 \\+ 16\\) needs a context of 2147483656 positions")
latte_cli_test(NAME bench_past_trained_context ARGS bench --model ${_bench_model} -p 99999999 -n 0 -r 1 EXPECT_EXIT 1
               EXPECT_STDERR "-d and -p \\(0 \\+ 99999999\\) needs 99999999 positions, more than the model's trained context of")
latte_cli_test(NAME bench_unknown_backend ARGS bench --model ${_bench_model} -p 4 -n 0 -r 1 --attention flash
               EXPECT_EXIT 1 EXPECT_STDERR "unknown attention backend 'flash'")
latte_cli_test(NAME bench_bad_device ARGS bench --model ${_bench_model} --device tpu EXPECT_EXIT 1
               EXPECT_STDERR "invalid device 'tpu'")
latte_cli_test(NAME bench_kernels_on_cpu ARGS bench --model ${_bench_model} --kernels EXPECT_EXIT 1
               EXPECT_STDERR "--kernels times CUDA kernels and needs --device cuda:N")
latte_cli_test(NAME bench_unknown_option ARGS bench --model ${_bench_model} --frobnicate EXPECT_EXIT 1
               EXPECT_STDERR "frobnicate")
# the LATTE_* variables: a bad value fails the load naming it; the set ones are printed above the table
latte_cli_test(NAME bench_bad_environment ARGS bench --model ${_bench_model} -p 4 -n 0 -r 1 --threads 1 EXPECT_EXIT 1
               EXPECT_STDERR "environment variable LATTE_GEMV_DENSE_ROWS='200': expected an integer from 9 to 128")
set_tests_properties(cli_bench_bad_environment PROPERTIES ENVIRONMENT "LATTE_GEMV_DENSE_ROWS=200")
latte_cli_test(NAME bench_environment_line ARGS bench --model ${_bench_model} -p 4 -n 0 -r 1 --threads 1
               EXPECT_STDOUT "environment: [^\n]*LATTE_PDL=off[^\n]*\n\n\| model")
set_tests_properties(cli_bench_environment_line PROPERTIES ENVIRONMENT "LATTE_PDL=off")
set_tests_properties(cli_bench_table cli_bench_json cli_bench_bad_prompt cli_bench_bad_environment cli_bench_environment_line cli_bench_negative_gen cli_bench_zero_batch
                     cli_bench_zero_reps cli_bench_nothing_to_run cli_bench_context_overflow cli_bench_unknown_backend cli_bench_bad_device
                     cli_bench_kernels_on_cpu cli_bench_unknown_option cli_bench_tp_scaling cli_bench_tp_bad_moe PROPERTIES FIXTURES_REQUIRED cli_model)
# kernel-bench (CUDA builds only) and quant-bench: bad option values are errors that name the option (not an
# exception's name)
if(LATTE_CUDA)
  latte_cli_test(NAME kernel_bench_bad_batches ARGS kernel-bench --batches q EXPECT_EXIT 1
                 EXPECT_STDERR "--batches: 'q' is not an integer")
  latte_cli_test(NAME kernel_bench_cpu_device ARGS kernel-bench --device cpu EXPECT_EXIT 1
                 EXPECT_STDERR "kernel-bench: --device cpu is not a CUDA device")
  latte_cli_test(NAME kernel_bench_bad_device ARGS kernel-bench --device gpu0 EXPECT_EXIT 1
                 EXPECT_STDERR "invalid device 'gpu0'")
endif()
latte_cli_test(NAME quant_bench_bad_seconds ARGS quant-bench --seconds abc EXPECT_EXIT 1
               EXPECT_STDERR "--seconds: 'abc' is not a number")
latte_cli_test(NAME quant_bench_bad_stream ARGS quant-bench --stream-mb 1e999 EXPECT_EXIT 1
               EXPECT_STDERR "--stream-mb: '1e999' is not a number")
