# `latte inspect` end to end: a real vocabulary file, a synthetic DeepSeek-shaped model written by an
# independent Python script, and invalid files (exit status 1, `error: <what and where>` on stderr).
set(_vocab ${PROJECT_SOURCE_DIR}/tests/data/ggml-vocab-deepseek-llm.gguf)

latte_cli_test(NAME inspect_vocab ARGS inspect ${_vocab}
               EXPECT_STDOUT "version +GGUF v3.*metadata +23 keys.*tokenizer.ggml.tokens +\\[string\\] +\\[\"!\", \"\\\\\"\", \"#\", .*\\.\\.\\.\\] \\(102400 elements\\).*tokenizer.ggml.add_bos_token +bool +true.*totals: 0 tensors")
latte_cli_test(NAME inspect_vocab_json ARGS inspect --json --array-items 2 ${_vocab}
               EXPECT_STDOUT "\"tensor_count\": 0,.*\"key\": \"tokenizer.ggml.merges\",.*\"length\": 99757,.*\"truncated\": true")
latte_cli_test(NAME inspect_not_gguf ARGS inspect ${_vocab}.inp EXPECT_EXIT 1
               EXPECT_STDERR "^error: .*magic at byte offset 0: not a GGUF file")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/truncated-after-magic.gguf "GGUF")
latte_cli_test(NAME inspect_truncated ARGS inspect ${CMAKE_CURRENT_BINARY_DIR}/truncated-after-magic.gguf EXPECT_EXIT 1
               EXPECT_STDERR "^error: .*truncated-after-magic.gguf: version at byte offset 4: file truncated")
latte_cli_test(NAME inspect_missing_file ARGS inspect ${CMAKE_CURRENT_BINARY_DIR}/no-such-file.gguf EXPECT_EXIT 1
               EXPECT_STDERR "^error: .*no-such-file.gguf: no such file")
latte_cli_test(NAME inspect_no_file ARGS inspect EXPECT_EXIT 1 EXPECT_STDERR "^error: expected one file")

# Synthetic model files made at test time by the independent writer in scripts/.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  set(_tiny ${CMAKE_CURRENT_BINARY_DIR}/tiny-deepseek.gguf)
  set(_cut ${CMAKE_CURRENT_BINARY_DIR}/tiny-deepseek-cut.gguf)
  set(_make ${PROJECT_SOURCE_DIR}/scripts/make_synthetic_gguf.py)
  add_test(NAME cli_make_tiny_gguf COMMAND ${Python3_EXECUTABLE} ${_make} --tiny --out ${_tiny})
  add_test(NAME cli_make_cut_gguf COMMAND ${Python3_EXECUTABLE} ${_make} --tiny --cut-bytes 100 --out ${_cut})
  set_tests_properties(cli_make_tiny_gguf cli_make_cut_gguf PROPERTIES FIXTURES_SETUP latte_tiny_gguf LABELS cli)

  # Offsets, sizes and totals below are those the script computes from ggml's block sizes.
  latte_cli_test(NAME inspect_tiny_model ARGS inspect ${_tiny}
                 EXPECT_STDOUT "tensors +21\n.*general.architecture +string +\"deepseek2\".*blk.0.attn_k_b.weight +q8_0 +\\[32, 256, 2\\] +102144 +17408\n.*output.weight +q6_K +\\[256, 16\\] +797984 +3360\n.*totals: 21 tensors, 1214724 parameters \\(1.21 M\\), 801328 bytes.*q4_K +8 +831488 ")
  latte_cli_test(NAME inspect_tiny_model_no_tensors ARGS inspect --no-tensors ${_tiny}
                 EXPECT_STDOUT "tokenizer.ggml.eos_token_id +u32 +15\n\ntotals: 21 tensors")
  latte_cli_test(NAME inspect_tiny_model_json ARGS inspect --json ${_tiny}
                 EXPECT_STDOUT "\"name\": \"blk.0.ffn_down_exps.weight\",\n +\"type\": \"q6_K\",\n +\"shape\": \\[\n +256,\n +256,\n +4\n +\\],\n +\"offset\": 454432,\n +\"bytes\": 215040")
  latte_cli_test(NAME inspect_cut_model ARGS inspect ${_cut} EXPECT_EXIT 1
                 EXPECT_STDERR "^error: .*tensor 'output.weight' data at byte offset [0-9]+: 3360 bytes at data offset 797984 extend past the end of the file")
  set_tests_properties(cli_inspect_tiny_model cli_inspect_tiny_model_no_tensors cli_inspect_tiny_model_json
                       cli_inspect_cut_model PROPERTIES FIXTURES_REQUIRED latte_tiny_gguf)
endif()
