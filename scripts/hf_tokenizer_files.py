"""tokenizer.json documents for the reference checks, written from files the repository holds.

Each builder returns a dict in the layout of the `tokenizers` library (tokenizer.json version
1.0) that uses the components of one model family:

  llama3       byte-level BPE from the LLaMA 3 ranks, Split(LLaMA 3 regex) + ByteLevel, template BOS
  qwen2/qwen3  the same vocabulary laid out as Qwen2/2.5/3 files are: NFC normalizer, Qwen's own
               Split regex (single digits), ByteLevel post-processor and decoder, Qwen's added
               tokens (Qwen3's <think>/<tool_call> are not special)
  smollm2      the same vocabulary as SmolLM/SmolLM2 files: Digits(individual) + ByteLevel
               pre-tokenizer, the 17 StarCoder-style specials at ids 0..16 inside the vocab, and a
               vocabulary that lacks a few control bytes (SmolLM's does), which tokenizers drops
  tinyllama,   SentencePiece-style BPE from the committed Phi-3-mini tokenizer.json (its vocab and
  llama2-hf,   merges are LLaMA 2's): Prepend/Replace normalizer, byte_fallback, fuse_unk,
  mistral-*    Replace/ByteFallback/Fuse/Strip decoder, <s> template; LLaMA-2-hf marks its added
               tokens normalized, TinyLlama does not; Mistral v0.3 uses a Metaspace pre-tokenizer
               (prepend_scheme first) instead of the normalizer
  mixed-*      small BPE vocabularies trained here with tokenizers' own trainer, with the
               components no real LLaMA-family file combines (subword prefix/suffix, unk, NFKC,
               Lowercase, Strip, regex Replace, every Split behavior, invert, Digits, Metaspace
               schemes, lstrip/rstrip/single_word/normalized added tokens, no decoder)
"""
import copy
import json

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
METASPACE = "\u2581"


def byte_level_alphabet():
    """GPT-2's byte -> character table."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) +
                 list(range(0xAE, 0xFF + 1)))
    alphabet, extra = {}, 0
    for b in range(256):
        if b in printable:
            alphabet[b] = chr(b)
        else:
            alphabet[b] = chr(256 + extra)
            extra += 1
    return alphabet


def byte_level_bpe(ranks):
    """Vocab and merges equivalent to tiktoken ranks, as HF's converters make them.

    A merge is every split of a token into two tokens; merges are ordered by the rank of the
    token they make (then by the ranks of the halves), so that "lowest merge first" picks what
    tiktoken's "lowest merged rank first" picks. Returns (vocab {spelling: id}, [(left, right)]).
    """
    alphabet = byte_level_alphabet()

    def spell(token):
        return "".join(alphabet[b] for b in token)

    merges = []
    for token, rank in ranks.items():
        splits = [(ranks[token[:i]], ranks[token[i:]], token[:i], token[i:])
                  for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
        for left_rank, right_rank, left, right in sorted(splits):
            merges.append((rank, left_rank, right_rank, left, right))
    merges.sort()
    vocab = {spell(token): rank for token, rank in ranks.items()}
    return vocab, [(spell(l), spell(r)) for _, _, _, l, r in merges]


def added(content, id, special=True, normalized=False, lstrip=False, rstrip=False, single_word=False):
    return {"id": id, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}


def bpe_model(vocab, merges, merges_as_pairs=False, **options):
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
             "vocab": vocab,
             "merges": [[l, r] if merges_as_pairs else f"{l} {r}" for l, r in merges]}
    model.update(options)
    return model


def template(bos):
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": None, "tokens": [bos]}}}


def with_template_ids(doc, bos, bos_id):
    doc["post_processor"]["special_tokens"][bos]["ids"] = [bos_id]
    return doc


def byte_level(add_prefix_space=False, trim_offsets=True, use_regex=True):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets,
            "use_regex": use_regex}


def document(model, added_tokens, normalizer=None, pre_tokenizer=None, post_processor=None, decoder=None):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": post_processor,
            "decoder": decoder, "model": model}


def llama3(vocab, merges, special_names, merges_as_pairs):
    base = len(vocab)
    doc = document(
        bpe_model(vocab, merges, merges_as_pairs, ignore_merges=True),
        [added(s, base + i) for i, s in enumerate(special_names)],
        pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
            byte_level(use_regex=False)]},
        post_processor=template("<|begin_of_text|>"),
        decoder=byte_level(add_prefix_space=True))
    return with_template_ids(doc, "<|begin_of_text|>", base)


QWEN2_SPECIALS = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
                  ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
                  ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
                  ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
                  ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
                  ("</tool_call>", False), ("<|fim_prefix|>", True), ("<|fim_middle|>", True),
                  ("<|fim_suffix|>", True), ("<|fim_pad|>", True), ("<|repo_name|>", True),
                  ("<|file_sep|>", True)]
QWEN3_EXTRA = [("<tool_response>", False), ("</tool_response>", False), ("<think>", False), ("</think>", False)]


def qwen(vocab, merges, qwen3):
    base = len(vocab)
    specials = QWEN2_SPECIALS + (QWEN3_EXTRA if qwen3 else [])
    return document(
        bpe_model(vocab, merges, merges_as_pairs=qwen3, continuing_subword_prefix="", end_of_word_suffix=""),
        [added(s, base + i, special=special) for i, (s, special) in enumerate(specials)],
        normalizer={"type": "NFC"},
        pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
            byte_level(use_regex=False)]},
        post_processor=byte_level(trim_offsets=False, use_regex=False),
        decoder=byte_level(trim_offsets=False, use_regex=False))


SMOLLM_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>",
                   "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>",
                   "<jupyter_start>", "<jupyter_text>", "<jupyter_code>", "<jupyter_output>",
                   "<jupyter_script>", "<empty_output>"]
SMOLLM_MISSING_BYTES = [0x04, 0x05, 0x06, 0x0E, 0x7F]


def smollm2(vocab, merges):
    alphabet = byte_level_alphabet()
    missing = {alphabet[b] for b in SMOLLM_MISSING_BYTES}
    kept = sorted((i, t) for t, i in vocab.items() if not missing.intersection(t))
    new_vocab = {s: i for i, s in enumerate(SMOLLM_SPECIALS)}
    for _, token in kept:
        new_vocab[token] = len(new_vocab)
    new_merges = [(l, r) for l, r in merges if l in new_vocab and r in new_vocab and l + r in new_vocab]
    return document(
        bpe_model(new_vocab, new_merges),
        [added(s, i) for i, s in enumerate(SMOLLM_SPECIALS)],
        pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level()]},
        post_processor=byte_level(), decoder=byte_level())


SENTENCEPIECE_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": METASPACE}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
SENTENCEPIECE_NORMALIZER = {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": METASPACE},
    {"type": "Replace", "pattern": {"String": " "}, "content": METASPACE}]}


def sentencepiece_style(phi3, variant):
    """LLaMA-2-family files from Phi-3-mini's vocab and merges (LLaMA 2's)."""
    model = copy.deepcopy(phi3["model"])
    vocab = model["vocab"]
    normalized = variant == "llama2-hf"
    tokens = [added("<unk>", 0, normalized=normalized), added("<s>", 1, normalized=normalized),
              added("</s>", 2, normalized=normalized)]
    doc = document(model, tokens, normalizer=SENTENCEPIECE_NORMALIZER, post_processor=template("<s>"),
                   decoder=SENTENCEPIECE_DECODER)
    if variant.startswith("mistral"):
        doc["added_tokens"] += [added("[INST]", len(vocab)), added("[/INST]", len(vocab) + 1)]
        doc["normalizer"] = None
        doc["pre_tokenizer"] = {"type": "Metaspace", "replacement": METASPACE, "prepend_scheme": "first",
                                "split": False}
    if variant == "mistral-metaspace-decoder":
        doc["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Metaspace", "replacement": METASPACE, "prepend_scheme": "first", "split": False},
            {"type": "ByteFallback"}, {"type": "Fuse"}]}
    return with_template_ids(doc, "<s>", 1)


def mixed(texts, variant):
    """Small trained vocabularies with the components real LLaMA-family files do not combine."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    affixes = {"continuing_subword_prefix": "##", "end_of_word_suffix": "</w>"} if variant == "mixed-affixes" else {}
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]", fuse_unk=True, **affixes))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["[UNK]"], show_progress=False, **affixes)
    tokenizer.train_from_iterator([t.lower() for t in texts] + [t.upper() for t in texts] + texts, trainer)
    doc = json.loads(tokenizer.to_str())
    vocab = doc["model"]["vocab"]
    next_id = len(vocab)
    for content, flags in [("<sep>", dict(lstrip=True, rstrip=True)),
                           ("hello", dict(special=False, normalized=True, single_word=True)),
                           ("WORLD", dict(special=False, normalized=True)), ("<|tag|>", dict(rstrip=True)),
                           ("\u00e9t\u00e9", dict(special=False))]:
        # The id tokenizers gives it: the vocab's for a string the vocab has, else the next one.
        if content in vocab:
            id = vocab[content]
        else:
            id, next_id = next_id, next_id + 1
        doc["added_tokens"].append(added(content, id, **flags))
    if variant == "mixed-affixes":
        doc["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "NFKC"}, {"type": "Lowercase"},
            {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
            {"type": "Strip", "strip_left": True, "strip_right": True}]}
        doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": False},
            {"type": "Digits", "individual_digits": False}]}
        doc["decoder"] = None
    elif variant == "mixed-behaviors":
        doc["normalizer"] = {"type": "NFD"}
        doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "[aeiou]"}, "behavior": "MergedWithPrevious", "invert": False},
            {"type": "Split", "pattern": {"Regex": r"\p{P}"}, "behavior": "MergedWithNext", "invert": False},
            {"type": "Split", "pattern": {"Regex": r"\d+"}, "behavior": "Contiguous", "invert": True},
            {"type": "Metaspace", "replacement": METASPACE, "prepend_scheme": "always", "split": True}]}
        doc["decoder"] = {"type": "Metaspace", "replacement": METASPACE, "prepend_scheme": "always",
                          "split": True}
    else:  # mixed-never
        doc["model"]["ignore_merges"] = True
        doc["normalizer"] = {"type": "NFKD"}
        doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "Split", "pattern": {"Regex": r"\s"}, "behavior": "Isolated", "invert": True},
            {"type": "Metaspace", "replacement": "_", "prepend_scheme": "never", "split": False}]}
        doc["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "_"}, "content": " "},
            {"type": "Strip", "content": " ", "start": 2, "stop": 0}]}
    return doc
