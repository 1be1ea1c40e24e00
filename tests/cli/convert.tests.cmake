# `latte convert`: a transformers checkpoint (the deepseek-v3 oracle fixture) and random models, then
# `latte generate` on what was written; argument and input errors.
set(_oracle ${PROJECT_SOURCE_DIR}/tests/data/oracle)
set(_out ${CMAKE_CURRENT_BINARY_DIR}/convert)
file(MAKE_DIRECTORY ${_out})

latte_cli_test(NAME convert_help ARGS convert --help EXPECT_STDOUT "usage: latte convert MODEL_DIR -o OUT.gguf")
latte_cli_test(NAME convert_checkpoint
               ARGS convert ${_oracle}/deepseek-v3 -o ${_out}/v3-q8_0.gguf --type q8_0 -t 2
               EXPECT_STDERR "wrote .*v3-q8_0.gguf: [0-9]+ tensors")
set_tests_properties(cli_convert_checkpoint PROPERTIES FIXTURES_SETUP cli_converted)
# The converted file runs: 4 greedy tokens from the oracle's first prompt tokens.
latte_cli_test(NAME convert_then_generate ARGS generate --model ${_out}/v3-q8_0.gguf --tokens "0 12 40" -n 4 --greedy
               EXPECT_STDOUT "^[0-9]+ [0-9]+ [0-9]+ [0-9]+\n$")
set_tests_properties(cli_convert_then_generate PROPERTIES FIXTURES_REQUIRED cli_converted)
latte_cli_test(NAME convert_vocab_only ARGS convert ${_oracle}/glm-4.7-flash -o ${_out}/flash-vocab.gguf --vocab-only
               --no-progress)
latte_cli_test(NAME convert_random
               ARGS convert --random --preset test-glm-dsa --type q4_k_m --seed 3 -o ${_out}/random-dsa.gguf
               EXPECT_STDERR "wrote .*random-dsa.gguf: q4_k_m preset test-glm-dsa")
set_tests_properties(cli_convert_random PROPERTIES FIXTURES_SETUP cli_converted_random)
latte_cli_test(NAME convert_random_then_generate
               ARGS generate --model ${_out}/random-dsa.gguf --tokens "1 2 3" -n 2 --greedy
               EXPECT_STDOUT "^[0-9]+ [0-9]+\n$")
set_tests_properties(cli_convert_random_then_generate PROPERTIES FIXTURES_REQUIRED cli_converted_random)

latte_cli_test(NAME convert_no_output ARGS convert ${_oracle}/deepseek-v3 EXPECT_EXIT 1
               EXPECT_STDERR "no output file")
latte_cli_test(NAME convert_bad_type ARGS convert ${_oracle}/deepseek-v3 -o ${_out}/x.gguf --type q3_k EXPECT_EXIT 1
               EXPECT_STDERR "unknown --type 'q3_k' \\(choices: f32, f16, bf16, q8_0")
latte_cli_test(NAME convert_missing_folder ARGS convert ${_out}/no-such-model -o ${_out}/x.gguf EXPECT_EXIT 1
               EXPECT_STDERR "no-such-model: not a directory")
latte_cli_test(NAME convert_not_a_model ARGS convert ${PROJECT_SOURCE_DIR}/tests/cli -o ${_out}/x.gguf EXPECT_EXIT 1
               EXPECT_STDERR "config.json")
latte_cli_test(NAME convert_unknown_preset ARGS convert --random --preset llama -o ${_out}/x.gguf EXPECT_EXIT 1
               EXPECT_STDERR "unknown model preset 'llama'")
latte_cli_test(NAME convert_random_needs_preset ARGS convert --random -o ${_out}/x.gguf EXPECT_EXIT 1
               EXPECT_STDERR "--random needs --preset")
latte_cli_test(NAME convert_bad_layers ARGS convert --random --preset test-v3 --layers 0 -o ${_out}/x.gguf
               EXPECT_EXIT 1 EXPECT_STDERR "--layers needs an integer >= 1")
