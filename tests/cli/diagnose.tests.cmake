# `latte diagnose` and `latte perplexity` on random-weight test-v3 models (one with a byte-level
# vocabulary, so text prompts work).
set(_model ${CMAKE_CURRENT_BINARY_DIR}/cli-test-v3.gguf)  # written by the cli_model fixture (model.tests.cmake)
set(_bytes_model ${CMAKE_CURRENT_BINARY_DIR}/cli-test-v3-bytes.gguf)
add_test(NAME cli_bytes_model_fixture COMMAND latte_write_test_model test-v3 ${_bytes_model} split+bytes)
set_tests_properties(cli_bytes_model_fixture PROPERTIES FIXTURES_SETUP cli_bytes_model LABELS cli)
set(_taps ${CMAKE_CURRENT_BINARY_DIR}/diagnose-taps)
set(_text ${CMAKE_CURRENT_BINARY_DIR}/perplexity-text.txt)
file(WRITE ${_text} "The failure this project was born from: a model loads without an error and writes garbage, \
and nobody knows which of a thousand operations is wrong. Perplexity over held-out text tells sense from it.\n")

latte_cli_test(NAME diagnose_backends_agree
               ARGS diagnose --model ${_model} --tokens "5 17 3 250 9 77" --compare cpu:mla,cpu:standard
               EXPECT_STDOUT "blk.1.attn_heads +\\[6,[0-9]+,[0-9]+\\] .* ok\n.*all [0-9]+ taps agree \\(bound 0.0001\\)\n$")
latte_cli_test(NAME diagnose_names_the_faulty_tap
               ARGS diagnose --model ${_model} --tokens "5 17 3 250 9 77" --inject-attention-fault 1
                    --compare cpu:mla,cpu:faulty-mla
               EXPECT_EXIT 2
               EXPECT_STDOUT "blk.1.k_pe .* ok\nblk.1.attn_heads .* DIVERGES\n.*first divergence: blk.1.attn_heads, rel err 0.5 \\(bound 0.0001\\); upstream taps agree\n$")
latte_cli_test(NAME diagnose_replay_decisions
               ARGS diagnose --model ${_model} --tokens "5 17 3 250 9 77" --compare cpu:mla,cpu:standard
                    --replay-decisions
               EXPECT_STDOUT "blk.2.expert_ids +\\[6,4\\] +0 .*all [0-9]+ taps agree \\(bound 0.0001\\)\ndecisions of cpu:standard replayed on cpu:mla: experts: 12 checked, 0 flipped; all near-ties\n$")
latte_cli_test(NAME diagnose_replay_needs_a_cpu_side
               ARGS diagnose --model ${_model} --tokens "1 2" --replay-decisions
               EXPECT_EXIT 1 EXPECT_STDERR "--replay-decisions needs --compare A,B with A on the cpu")
latte_cli_test(NAME diagnose_text_prompt ARGS diagnose --model ${_bytes_model} --prompt "Where do they part ways?"
               EXPECT_STDOUT "\\(25 tokens\\).*all [0-9]+ taps agree")
latte_cli_test(NAME diagnose_dump ARGS diagnose --model ${_model} --tokens "4 8 15 16 23 42" --dump ${_taps}
               EXPECT_STDOUT "wrote [0-9]+ taps of cpu:mla to ")
set_tests_properties(cli_diagnose_dump PROPERTIES FIXTURES_SETUP cli_taps_dump)
latte_cli_test(NAME diagnose_against_dump ARGS diagnose --model ${_model} --against ${_taps}
               EXPECT_STDOUT "^cpu:mla against the dump .*logits +\\[6,512\\] .*all [0-9]+ taps agree")
latte_cli_test(NAME diagnose_against_own_dump ARGS diagnose --model ${_model} --against ${_taps} --compare cpu:standard,cpu:mla
               EXPECT_STDOUT "against the dump .*all [0-9]+ taps agree \\(bound 0.0001\\)\n$")
latte_cli_test(NAME diagnose_against_dump_finds_fault
               ARGS diagnose --model ${_model} --against ${_taps} --inject-attention-fault 0 --compare cpu:faulty-mla,cpu:mla
               EXPECT_EXIT 2 EXPECT_STDOUT "against the dump .*first divergence: blk.0.attn_heads, rel err")
latte_cli_test(NAME diagnose_against_other_tokens ARGS diagnose --model ${_model} --against ${_taps} --tokens "1 2"
               EXPECT_EXIT 1 EXPECT_STDERR "the tokens differ from those of the dump")
set_tests_properties(cli_diagnose_against_dump cli_diagnose_against_own_dump cli_diagnose_against_dump_finds_fault
                     cli_diagnose_against_other_tokens PROPERTIES FIXTURES_REQUIRED "cli_model;cli_taps_dump")
# tp:N sides: CPU tensor parallelism over in-process ranks; the per-head taps gathered in head order.
latte_cli_test(NAME diagnose_tp_agrees
               ARGS diagnose --model ${_model} --tokens "5 17 3 250 9 77" --compare cpu:mla,tp:2
               EXPECT_STDOUT "^tp:2 against cpu:mla .*blk.0.q +\\[6,4,[0-9]+\\] .* ok\n.*blk.1.attn_heads +\\[6,4,[0-9]+\\] .* ok\n.*logits +\\[6,512\\] .* ok\nall [0-9]+ taps agree \\(bound 0.0001\\)\n$")
latte_cli_test(NAME diagnose_tp_standard_agrees
               ARGS diagnose --model ${_model} --tokens "5 17 3 250 9 77" --compare tp:4:standard,cpu:mla
               EXPECT_STDOUT "^cpu:mla against tp:4:standard .*all [0-9]+ taps agree \\(bound 0.0001\\)\n$")
latte_cli_test(NAME diagnose_tp_names_the_faulty_tap
               ARGS diagnose --model ${_model} --tokens "5 17 3 250 9 77" --inject-attention-fault 1
                    --compare cpu:mla,tp:2:faulty-mla
               EXPECT_EXIT 2
               EXPECT_STDOUT "blk.1.k_pe .* ok\nblk.1.attn_heads +\\[6,4,[0-9]+\\] .* DIVERGES\n.*first divergence: blk.1.attn_heads, rel err 0.5 \\(bound 0.0001\\); upstream taps agree\n$")
latte_cli_test(NAME diagnose_tp_bad_count ARGS diagnose --model ${_model} --tokens "1" --compare cpu:mla,tp:0
               EXPECT_EXIT 1 EXPECT_STDERR "'tp:0' is not tp:N or tp:N:BACKEND")
latte_cli_test(NAME diagnose_tp_not_divisible ARGS diagnose --model ${_model} --tokens "1" --compare cpu:mla,tp:3
               EXPECT_EXIT 1 EXPECT_STDERR "4 attention heads .* not divisible by 3 ranks")
set_tests_properties(cli_diagnose_tp_agrees cli_diagnose_tp_standard_agrees cli_diagnose_tp_names_the_faulty_tap
                     cli_diagnose_tp_bad_count cli_diagnose_tp_not_divisible PROPERTIES FIXTURES_REQUIRED cli_model)
latte_cli_test(NAME diagnose_bad_side ARGS diagnose --model ${_model} --tokens "1" --compare cpu:mla,gpu
               EXPECT_EXIT 1 EXPECT_STDERR "'gpu' is not DEVICE:BACKEND")
latte_cli_test(NAME diagnose_needs_a_prompt ARGS diagnose --model ${_model}
               EXPECT_EXIT 1 EXPECT_STDERR "--prompt or --tokens is required")
set_tests_properties(cli_diagnose_backends_agree cli_diagnose_names_the_faulty_tap cli_diagnose_dump
                     cli_diagnose_replay_decisions cli_diagnose_replay_needs_a_cpu_side
                     cli_diagnose_bad_side cli_diagnose_needs_a_prompt PROPERTIES FIXTURES_REQUIRED cli_model)
if(NOT LATTE_CUDA)
  # A CPU-only build: cuda sides fail with the library's error, and the self-test cannot run (exit 3).
  latte_cli_test(NAME diagnose_cuda_side_on_cpu_build
                 ARGS diagnose --model ${_model} --tokens "1 2" --compare cpu:mla,cuda:mla
                 EXPECT_EXIT 1 EXPECT_STDERR "device cuda:0: latte was built without CUDA")
  set_tests_properties(cli_diagnose_cuda_side_on_cpu_build PROPERTIES FIXTURES_REQUIRED cli_model)
  latte_cli_test(NAME diagnose_selftest_without_cuda ARGS diagnose --selftest
                 EXPECT_EXIT 3 EXPECT_STDOUT "selftest not run: this build of latte has no CUDA backend")
endif()

latte_cli_test(NAME perplexity_of_a_text
               ARGS perplexity --model ${_bytes_model} --file ${_text} --ctx 48
               EXPECT_STDOUT "^ppl [0-9.]+  mean nll [0-9.]+ \\+- [0-9.]+  tokens [0-9]+ scored of [0-9]+  windows [0-9]+  [0-9.]+ t/s\n$")
latte_cli_test(NAME perplexity_bad_stride
               ARGS perplexity --model ${_bytes_model} --file ${_text} --ctx 8 --stride 9
               EXPECT_EXIT 1 EXPECT_STDERR "stride 9 is outside \\[1, n_ctx = 8\\]")
latte_cli_test(NAME perplexity_second_half
               ARGS perplexity --model ${_bytes_model} --file ${_text} --ctx 8 --score second-half
               EXPECT_STDOUT "^ppl [0-9.]+  mean nll [0-9.]+ \\+- [0-9.]+  tokens [0-9]+ scored of [0-9]+  windows [0-9]+  [0-9.]+ t/s\n$")
latte_cli_test(NAME perplexity_bad_score
               ARGS perplexity --model ${_bytes_model} --file ${_text} --score halves
               EXPECT_EXIT 1 EXPECT_STDERR "--score must be from-second or second-half, got 'halves'")
set_tests_properties(cli_diagnose_text_prompt cli_perplexity_of_a_text cli_perplexity_bad_stride
                     cli_perplexity_second_half cli_perplexity_bad_score PROPERTIES FIXTURES_REQUIRED cli_bytes_model)
latte_cli_test(NAME perplexity_needs_a_tokenizer
               ARGS perplexity --model ${_model} --file ${_text}
               EXPECT_EXIT 1 EXPECT_STDERR "no tokenizer")
set_tests_properties(cli_perplexity_needs_a_tokenizer PROPERTIES FIXTURES_REQUIRED cli_model)

# tp:N on a glm-dsa model (indexer, sparse attention once the prompt passes top_k = 16 positions).
set(_dsa_model ${CMAKE_CURRENT_BINARY_DIR}/cli-test-glm-dsa.gguf)
add_test(NAME cli_dsa_model_fixture COMMAND latte_write_test_model test-glm-dsa ${_dsa_model})
set_tests_properties(cli_dsa_model_fixture PROPERTIES FIXTURES_SETUP cli_dsa_model LABELS cli)
latte_cli_test(NAME diagnose_tp_dsa_agrees
               ARGS diagnose --model ${_dsa_model} --compare tp:2:standard,tp:2
                    --tokens "3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30"
               EXPECT_STDOUT "blk.0.index_selection +\\[28,16\\] .* ok\n.*blk.0.attn_heads +\\[28,4,256\\] .* ok\n.*all [0-9]+ taps agree \\(bound 0.0001\\)\n$")
set_tests_properties(cli_diagnose_tp_dsa_agrees PROPERTIES FIXTURES_REQUIRED cli_dsa_model)

# The self-test's cases at a model's shapes, listed without a GPU (every family for a MoE model with an
# indexer); --list needs --selftest.
latte_cli_test(NAME diagnose_selftest_list_model ARGS diagnose --selftest --list --model ${_dsa_model}
               EXPECT_STDOUT "^self-test cases at the shapes of model test-glm-dsa:\ndequantize .*\ngemv .*\ngemm .*rms_norm .*rms_norm_residual .*rope_yarn +rope_yarn q .*rope_yarn +rope_yarn indexer .*moe_router .*moe_decode .*moe_prefill .*silu_gate .*embedding .*mla_decode +mla_decode bf16 +4 heads.*standard_decode .*flash_prefill .*flash_prefill +flash_prefill sparse .*dsa_indexer +dsa_indexer +4x128, q 3, kv 316 8 top 16 .*kv_append .*kv_append .*\n$")
set_tests_properties(cli_diagnose_selftest_list_model PROPERTIES FIXTURES_REQUIRED cli_dsa_model)
latte_cli_test(NAME diagnose_selftest_list_presets ARGS diagnose --selftest --list
               EXPECT_STDOUT "^self-test cases at the shapes of presets deepseek-v2-lite, deepseek-v3, glm-5:\n.*gemv +gemv_quant q4_K +576x7168 .*moe_route sigmoid\\+bias +16 tok, E 256 k 8 g 4/8 .*dsa_indexer .*top 2048")
latte_cli_test(NAME diagnose_list_needs_selftest ARGS diagnose --list EXPECT_EXIT 1 EXPECT_STDERR "--list goes with --selftest")
if(NOT LATTE_CUDA)
  latte_cli_test(NAME diagnose_selftest_model_without_cuda ARGS diagnose --selftest --model ${_dsa_model}
                 EXPECT_EXIT 3 EXPECT_STDOUT "selftest not run: this build of latte has no CUDA backend")
  set_tests_properties(cli_diagnose_selftest_model_without_cuda PROPERTIES FIXTURES_REQUIRED cli_dsa_model)
endif()
