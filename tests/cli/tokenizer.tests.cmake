# `latte tokenize` end to end. Expected ids come from llama.cpp's DeepSeek LLM test vectors
# (tests/data/ggml-vocab-deepseek-llm.gguf.out: "Hello world" -> 17464 1843, "\n" -> 185, BOS 100000)
# and from DeepSeek-V3's tokenizer.json (<｜User｜> = 128803, BOS 0).
set(_ds_llm ${PROJECT_SOURCE_DIR}/tests/data/ggml-vocab-deepseek-llm.gguf)
set(_ds_v3 ${PROJECT_SOURCE_DIR}/tests/data/deepseek-v3-vocab.gguf)

latte_cli_test(NAME tokenize_adds_bos_as_the_vocabulary_asks
               ARGS tokenize --model ${_ds_llm} "Hello world" EXPECT_STDOUT "^100000 17464 1843\n$")
latte_cli_test(NAME tokenize_no_bos
               ARGS tokenize --model ${_ds_llm} --no-bos "Hello world" EXPECT_STDOUT "^17464 1843\n$")
latte_cli_test(NAME tokenize_file
               ARGS tokenize --model ${_ds_llm} --no-bos --file ${PROJECT_SOURCE_DIR}/tests/data/tokenize-cli-input.txt
               EXPECT_STDOUT "^17464 1843 185\n$")
latte_cli_test(NAME tokenize_decode
               ARGS tokenize --model ${_ds_llm} --decode "100000 17464 1843"
               EXPECT_STDOUT "^<｜begin▁of▁sentence｜>Hello world\n$")
latte_cli_test(NAME tokenize_special_parses_control_tokens
               ARGS tokenize --model ${_ds_v3} --special --no-bos "<｜User｜>" EXPECT_STDOUT "^128803\n$")
latte_cli_test(NAME tokenize_without_special_keeps_control_text_as_text
               ARGS tokenize --model ${_ds_v3} --no-bos "<｜User｜>" EXPECT_STDOUT "^[0-9]+ [0-9 ]+\n$")
latte_cli_test(NAME tokenize_rejects_an_id_outside_the_vocabulary
               ARGS tokenize --model ${_ds_llm} --decode "5 102400" EXPECT_EXIT 1
               EXPECT_STDERR "token id 102400 is outside the vocabulary of 102400 tokens")
latte_cli_test(NAME tokenize_rejects_a_non_number_id
               ARGS tokenize --model ${_ds_llm} --decode "5 x7" EXPECT_EXIT 1 EXPECT_STDERR "'x7' is not a token id")
latte_cli_test(NAME tokenize_needs_a_vocabulary
               ARGS tokenize "Hello" EXPECT_EXIT 1 EXPECT_STDERR "exactly one of --model")
latte_cli_test(NAME tokenize_missing_model_file
               ARGS tokenize --model ${PROJECT_SOURCE_DIR}/tests/data/no-such.gguf "Hello" EXPECT_EXIT 1
               EXPECT_STDERR "no-such.gguf")
latte_cli_test(NAME tokenize_help ARGS tokenize --help EXPECT_STDOUT "usage: latte tokenize")
