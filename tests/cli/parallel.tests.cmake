# `latte inspect --tp N`: the tensor-parallel plan of the test-v3 model written by model.tests.cmake's fixture.
set(_tp_model ${CMAKE_CURRENT_BINARY_DIR}/cli-test-v3.gguf)
latte_cli_test(NAME inspect_tp_plan ARGS inspect --tp 2 ${_tp_model}
               EXPECT_STDOUT "^tensor parallel 2: 2 attention head\\(s\\) per rank, 8 routed expert\\(s\\) per rank, MoE expert-parallel\n.*blk.0.attn_q_b.weight  f32  rows \\(heads\\): rank r holds rows \\[r\\*384, \\(r\\+1\\)\\*384\\).*blk.0.attn_kv_a_mqa.weight  f32  replicated.*blk.0.attn_output.weight  f32  columns \\(heads\\).*rank 1: .* of weights \\([0-9]+ bytes, [0-9.]+% of .*KV cache per token per rank")
latte_cli_test(NAME inspect_tp_tensor_moe ARGS inspect --tp 4 --tp-moe tensor --no-tensors ${_tp_model}
               EXPECT_STDOUT "^tensor parallel 4: 1 attention head\\(s\\) per rank, MoE tensor-parallel\nrank 0: ")
latte_cli_test(NAME inspect_tp_not_divisible ARGS inspect --tp 3 ${_tp_model} EXPECT_EXIT 1
               EXPECT_STDERR "^error: tensor parallel 3: the 4 attention heads .* are not divisible by 3 ranks")
latte_cli_test(NAME inspect_tp_bad_count ARGS inspect --tp 0 ${_tp_model} EXPECT_EXIT 1
               EXPECT_STDERR "--tp needs a positive rank count")
set_tests_properties(cli_inspect_tp_plan cli_inspect_tp_tensor_moe cli_inspect_tp_not_divisible
                     PROPERTIES FIXTURES_REQUIRED cli_model)
latte_cli_test(NAME logits_tp_not_divisible ARGS logits --model ${_tp_model} --tokens "1 2" --tp 3 EXPECT_EXIT 1
               EXPECT_STDERR "4 attention heads .* not divisible by 3 ranks")
latte_cli_test(NAME logits_tp ARGS logits --model ${_tp_model} --tokens "1 2 3" --tp 2 EXPECT_STDOUT "^\\[-?[0-9]")
set_tests_properties(cli_logits_tp_not_divisible cli_logits_tp PROPERTIES FIXTURES_REQUIRED cli_model)
# `latte generate --tp-launch`: one rank of a model split over processes; without launch variables
# or on the CPU it stops before reading the model, saying what is missing.
latte_cli_test(NAME generate_tp_launch_no_environment ARGS generate --tp-launch --model ${_tp_model} --tokens "1 2"
               EXPECT_EXIT 1 EXPECT_STDERR "no launch environment: set LATTE_TP_RANK, LATTE_TP_WORLD and LATTE_TP_ID_FILE")
latte_cli_test(NAME generate_tp_launch_cpu ARGS generate --tp-launch --device cpu --model ${_tp_model} --tokens "1 2"
               EXPECT_EXIT 1 EXPECT_STDERR "device cpu is not a CUDA device")
set_tests_properties(cli_generate_tp_launch_no_environment cli_generate_tp_launch_cpu PROPERTIES FIXTURES_REQUIRED
                     cli_model)
