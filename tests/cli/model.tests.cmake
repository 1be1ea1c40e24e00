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
latte_cli_test(NAME model_generate_needs_greedy ARGS generate --model ${_model} --tokens "1" -n 2
               EXPECT_EXIT 1 EXPECT_STDERR "pass --greedy")
latte_cli_test(NAME model_missing_file ARGS logits --model ${CMAKE_CURRENT_BINARY_DIR}/no-such.gguf --tokens "1"
               EXPECT_EXIT 1 EXPECT_STDERR "no-such.gguf")
set_tests_properties(cli_model_token_out_of_range cli_model_bad_token_text cli_model_unknown_backend
                     cli_model_generate_needs_greedy PROPERTIES FIXTURES_REQUIRED cli_model)
