"""Every number the results pages quote from a paper, a report or a peer, with its
source. None is ours; each is context for our measurements, not a target our
presets reproduce, and the page that quotes one says how the settings differ.
"""

# ---- Katharopoulos et al., "Transformers are RNNs" (ICML 2020) ------------------------

KATHAROPOULOS = ("Katharopoulos et al., 'Transformers are RNNs: Fast Autoregressive "
                 "Transformers with Linear Attention', ICML 2020, arXiv:2006.16236")

# Table 2 (MNIST): test bits/dim and generation images/s, as the issue remembers them.
PAPER_MNIST = {"softmax": {"bits_per_dim": 0.621, "images_per_s": 0.45},
               "linear": {"bits_per_dim": 0.644, "images_per_s": 142.8}}
# The paper's generation speed-up of linear over softmax on MNIST (Table 2): 142.8 /
# 0.45 images/s, softmax there without a state (the whole forward pass per pixel).
PAPER_MNIST_SPEEDUP = 317
# Its appendix times a "stateful softmax" (softmax with cached keys and values, the
# like-for-like baseline of linear's RNN form) on MNIST: images/s, as issue 38 quotes.
PAPER_MNIST_STATEFUL_SOFTMAX = 7.56

# ---- the student report (../shared/seeds/004_*.txt) ----------------------------------

STUDENT = "the student report (../shared/seeds/004_*.txt)"
# Section 1.2: seconds to generate 100 MNIST images.
STUDENT_100_IMAGES_S = {"softmax": 367.91, "linear": 33.45}

# Section 2, the LoRA study on MNIST, in percent: base accuracy clean and on each
# shifted test set, full fine-tuning, LoRA fine-tuning and LoRA from scratch per rank
# (quantized, rotated, inverted).
LORA_REPORT = {
    "base_clean": 93.2,
    "base": {"quantized": 85.58, "rotated": 12.38, "inverted": 5.52},
    "full_ft": {"quantized": 93.57, "rotated": 91.97, "inverted": 76.41},
    "lora_ft": {1: (91.20, 37.53, 16.23), 2: (91.30, 49.01, 17.92),
                4: (91.42, 69.10, 16.32), 8: (91.39, 77.49, 32.19),
                16: (91.72, 86.95, 62.26), 32: (92.31, 89.50, 68.06),
                64: (93.19, 90.41, 71.88)},
    "lora_scratch": {1: (23.50, 25.91, 22.21), 2: (37.48, 43.96, 45.81),
                     4: (64.87, 62.60, 69.67), 8: (77.96, 82.39, 83.11),
                     16: (88.2, 86.76, 87.38), 32: (90.13, 90.62, 90.25),
                     64: (91.66, 91.85, 86.01)},
}

# ---- FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608) ---------------------------

# Table 3: RMSE on its outlier distribution; the abstract states the ratio, 2.6x.
FA3 = {"baseline FP8 (per-tensor)": 2.4e-2,
       "FlashAttention-3 FP8 (block + incoherent)": 9.1e-3}

# ---- Long Range Arena (Tay et al., ICLR 2021, arXiv:2011.04006), Table 1 --------------

# ListOps accuracy (%) of the model each of our variants implements: (LRA's model
# name, accuracy). flash, flash_pallas, ring, sdpa and fp8 compute the softmax
# attention function (fp8 in a lower precision), hence LRA's Transformer.
_TRANSFORMER = ("Transformer", 36.37)
LRA_LISTOPS_ACC = {
    "softmax": _TRANSFORMER, "flash": _TRANSFORMER, "flash_pallas": _TRANSFORMER,
    "ring": _TRANSFORMER, "sdpa": _TRANSFORMER, "fp8": _TRANSFORMER,
    "local": ("Local Attention", 15.82), "sparse": ("Sparse Trans.", 17.07),
    "linformer": ("Linformer", 35.70), "reformer": ("Reformer", 37.27),
    "linear": ("Linear Trans.", 16.13), "performer": ("Performer", 18.01),
}

# ---- the variant-comparison pages' reference sections ---------------------------------

NANOGPT = (
    "nanoGPT's character-level Tiny Shakespeare (Karpathy, github.com/karpathy/nanoGPT, "
    "README, section 'quick start'):\n\n"
    "| nanoGPT config | model | context, batch, iterations | best validation loss |\n"
    "|---|---|---|---|\n"
    "| `config/train_shakespeare_char.py` (one A100, about 3 min) | 6 layers, 6 heads, "
    "384 wide, dropout 0.2 | 256, 64, 5000 | 1.4697 |\n"
    "| its CPU command line (`--device=cpu`, about 3 min) | 4 layers, 4 heads, 128 wide, "
    "no dropout | 64, 12, 2000 | about 1.88 |\n\n"
    "nanoGPT reports cross-entropy in nats per character on its own 90/10 split of the "
    "same 1.1 MB text, as this project does (data/builders.py); its model is a GPT "
    "(learned positions, GELU, weight tying), ours pre-LN with sinusoidal positions. Our "
    "`cpu` preset copies nanoGPT's CPU settings (sizes, context 64, batch 12, 2000 "
    "steps, lr 1e-3, no dropout); the `gpu` preset its GPU config.")

LRA_LISTOPS = (
    "Long Range Arena, ListOps test accuracy (Tay et al., 'Long Range Arena: A Benchmark "
    "for Efficient Transformers', ICLR 2021, arXiv:2011.04006, Table 1; sequences up to "
    "2000 tokens, LRA's 6-layer 512-wide model with a CLS token, 5000 steps):\n\n"
    "| LRA model | ListOps accuracy | the variant here that corresponds |\n"
    "|---|---|---|\n"
    "| Transformer | 36.37 | `softmax` (and `flash`, `flash_pallas`, `ring`, `sdpa`: the same "
    "function; `fp8`: it in 8-bit floats) |\n"
    "| Local Attention | 15.82 | `local` |\n"
    "| Sparse Trans. | 17.07 | `sparse` |\n"
    "| Longformer | 35.63 | (`local` is its sliding window without the global tokens) |\n"
    "| Linformer | 35.70 | `linformer` |\n"
    "| Reformer | 37.27 | `reformer` |\n"
    "| Sinkhorn Trans. | 33.67 | - |\n"
    "| Synthesizer | 36.99 | - |\n"
    "| BigBird | 36.05 | - |\n"
    "| Linear Trans. | 16.13 | `linear` |\n"
    "| Performer | 18.01 | `performer` |\n\n"
    "Chance is 10% (10 classes). Our data follow LRA's generator's rules "
    "(lra_benchmarks/data/listops.py in "
    "google-research/long-range-arena) but are our own draw (data/listops.py), and the "
    "presets other than `gpu` use a smaller model and fewer steps (`cpu` also shorter "
    "sequences; the lines above the table say what differs), so their numbers are not "
    "comparable with the table's, only their ranking of variants is.")

COPY = (
    "The copy task is section 4.1 of Katharopoulos et al., 'Transformers are RNNs: Fast "
    "Autoregressive Transformers with Linear Attention' (ICML 2020), which trains on "
    "sequences of up to 128 tokens and compares softmax, linear and LSH (Reformer) "
    "attention by their training-loss curves; it gives curves, not a table, so no number "
    "is quoted here. What differs: every sequence here has the same length (two copies "
    "of the preset's symbols and two separators), and the model, batch and steps "
    "are this page's, smaller than the paper's. Jelassi et al., 'Repeat After Me: "
    "Transformers are Better than State Space Models at Copying' (ICML 2024), prove that "
    "a two-layer transformer can copy strings whose length is exponential in its size "
    "while a model with a fixed-size state cannot copy beyond what the state holds, and "
    "find transformers learn copying faster in practice: the rows of fixed-state "
    "variants (linear, performer, retention, gla, deltanet) are the ones this predicts "
    "to lag.\n")

MULTI30K = (
    "Multi30k en->de, test2016, a text-only Transformer trained from scratch: the "
    "official code of Wu et al., 'Good for Misconceived Reasons: An Empirical Revisiting "
    "on the Need for Visual Context in Multimodal Machine Translation' (ACL 2021, "
    "arXiv:2105.14462), github.com/LividWo/Revisit-MMT, README-baseline.md (commit "
    "29bf6b5), gives 41.02 BLEU for its fairseq `transformer_tiny` text-only baseline "
    "(shared BPE vocabulary, dropout 0.3, 8,000 updates of 4,096 tokens, the average of "
    "the last 10 checkpoints, beam 5, fairseq's BLEU on the tokenised output). The same "
    "paper finds the image features of multimodal systems to act mostly as a "
    "regulariser; Yao & Wan, 'Multimodal Transformer for Multimodal Machine Translation' "
    "(ACL 2020; outputs in github.com/QAQ-v/MMT, README) report 38.7 BLEU for a small "
    "Transformer that also reads image features. Both are references for the order of "
    "magnitude, not the same measurement: ours is a shared 8k sentencepiece vocabulary, "
    "no checkpoint averaging, and sacreBLEU on detokenised output, and BLEU computed "
    "under different tokenisations is not directly comparable (Post, 'A Call for Clarity "
    "in Reporting BLEU Scores', WMT 2018).")

# The reference sections of the variant-comparison pages, by name: a task's record
# names its page's (data/tasks/: Study.reference).
VARIANT_PAGES = {"NANOGPT": NANOGPT, "LRA_LISTOPS": LRA_LISTOPS, "COPY": COPY,
                 "MULTI30K": MULTI30K}
