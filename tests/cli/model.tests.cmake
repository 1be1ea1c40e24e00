# `latte logits` and `latte generate` on a random-weight test-v3 model written by a fixture.
add_executable(latte_write_test_model ${CMAKE_CURRENT_LIST_DIR}/write_test_model.cpp)
target_link_libraries(latte_write_test_model PRIVATE latte::latte)
target_include_directories(latte_write_test_model PRIVATE ${PROJECT_SOURCE_DIR}/src)
latte_target_warnings(latte_write_test_model)

set(_model ${CMAKE_CURRENT_BINARY_DIR}/cli-test-v3.gguf)
add_test(NAME cli_model_fixture COMMAND latte_write_test_model test-v3 ${_model})
set_tests_properties(cli_model_fixture PROPERTIES FIXTURES_SETUP cli_model LABELS cli)

add_test(NAME cli_model_logits_and_generate
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:latte-cli> -DMODEL=${_model} -DN_VOCAB=512
                 -P ${CMAKE_CURRENT_LIST_DIR}/check_model_cli.cmake)
set_tests_properties(cli_model_logits_and_generate PROPERTIES FIXTURES_REQUIRED cli_model LABELS cli)

latte_cli_test(NAME model_token_out_of_range ARGS logits --model ${_model} --tokens "1 512"
               EXPECT_EXIT 1 EXPECT_STDERR "token id 512 at index 1 is outside the vocabulary \\[0, 512\\)")
latte_cli_test(NAME model_bad_token_text ARGS logits --model ${_model} --tokens "1 x2"
               EXPECT_EXIT 1 EXPECT_STDERR "'x2' is not a token id")
latte_cli_test(NAME model_unknown_backend ARGS logits --model ${_model} --tokens "1" --attention flash
               EXPECT_EXIT 1 EXPECT_STDERR "unknown attention backend 'flash' \\(available: auto, mla, standard\\)")
latte_cli_test(NAME model_generate_sampled ARGS generate --model ${_model} --tokens "1 2" -n 5 --temp 0.8 --seed 7
               EXPECT_STDOUT "^[0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+\n$")
latte_cli_test(NAME model_generate_bad_temperature ARGS generate --model ${_model} --tokens "1" -n 2 --temp -1
               EXPECT_EXIT 1 EXPECT_STDERR "temperature")
latte_cli_test(NAME model_generate_nan_temperature ARGS generate --model ${_model} --tokens "1" -n 2 --temp nan
               EXPECT_EXIT 1 EXPECT_STDERR "--temp: 'nan' is not a number")
latte_cli_test(NAME model_missing_file ARGS logits --model ${CMAKE_CURRENT_BINARY_DIR}/no-such.gguf --tokens "1"
               EXPECT_EXIT 1 EXPECT_STDERR "no-such.gguf")
latte_cli_test(NAME model_generate_context_overflow ARGS generate --model ${_model} --tokens "1 2" -n 2147483647
               EXPECT_EXIT 1 EXPECT_STDERR "needs a context of 2147483649 positions, more than a session can hold")
set_tests_properties(cli_model_token_out_of_range cli_model_bad_token_text cli_model_unknown_backend
                     cli_model_generate_sampled cli_model_generate_bad_temperature cli_model_generate_nan_temperature
                     cli_model_generate_context_overflow
                     PROPERTIES FIXTURES_REQUIRED cli_model)

# `latte inspect` shows a supported model's config and weight audit; --audit lists every tensor.
latte_cli_test(NAME model_inspect_summary ARGS inspect --no-tensors ${_model}
               EXPECT_STDOUT "deepseek2, 3 blocks \\(1 dense, 1 MTP skipped\\).*audit: [0-9]+ tensors mapped, [0-9]+ skipped \\(MTP\\), 0 missing")
latte_cli_test(NAME model_inspect_audit ARGS inspect --no-tensors --audit ${_model}
               EXPECT_STDOUT "mapped: blk.0.attn_kv_a_mqa.weight \\(latent and k_pe projection\\).*skipped: blk.3.nextn.eh_proj.weight")
latte_cli_test(NAME model_inspect_audit_json ARGS inspect --json --no-tensors --audit ${_model}
               EXPECT_STDOUT "\"audit\": {\n *\"ok\": true")
set_tests_properties(cli_model_inspect_summary cli_model_inspect_audit cli_model_inspect_audit_json
                     PROPERTIES FIXTURES_REQUIRED cli_model)

# The shipped default model still writes sense: its perplexity on the first 4,096 tokens of the
# held-out Brown text was 198.3 when it was trained (PyTorch: 169.27 on the whole held-out text,
# latte 169.23 with either backend); a broken forward pass gives thousands. The sanitizer build
# scores the first 1,024 (196.9 with either backend): the same code in a quarter of the time.
if(LATTE_SANITIZE)
  set(_ppl_tokens 1024)
else()
  set(_ppl_tokens 4096)
endif()
add_test(NAME cli_shipped_model_perplexity
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:latte-cli> -DMODEL=${PROJECT_SOURCE_DIR}/models/latte-tiny-brown.gguf
                 -DTEXT=${PROJECT_SOURCE_DIR}/tests/data/brown-heldout.txt -DMAX_TOKENS=${_ppl_tokens} -DBOUND=215
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/check_perplexity.cmake)
# COST: ctest starts the long tests first (under the sanitizers this one took about 1.5 minutes at 4,096 tokens)
set_tests_properties(cli_shipped_model_perplexity PROPERTIES LABELS "cli" COST 50)
