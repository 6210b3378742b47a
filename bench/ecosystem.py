"""The ecosystem check: accel-lint on pinned outside code, compared with a committed triage.

    python bench/ecosystem.py [--corpus NAME ...] [--cache DIR] [--mirror-root DIR] [--json PATH]
                              [--write-new]

As ruff checks every change on real projects, this lints pinned outside corpora and compares
every finding with a committed triage table per corpus, ``bench/ecosystem/<corpus>.tsv``
(columns: path, line, code, verdict, reason; verdict is TP, FP, judgment, or ``missed`` for
a real bug found by reading that the linter did not report). It prints the findings that are
new (in no table row), gone (in the table, no longer reported) and the per-rule and total
counts. Untriaged findings count as false positives in the precision; recall is the TPs over
the TPs and the missed bugs still not reported. AL403 (info) is counted apart.

First contact: ``bench/ecosystem/first-contact/<corpus>.tsv`` is the triage of a corpus's first
lint, made before any model change for it, with its ``missed`` rows; it is never edited. Its
precision and recall are reported beside the current ones, and summed over all corpora.

Corpora (their code is never committed; it is unpacked into ``--cache``, default
``~/.cache/accel-lint-ecosystem``):

* ``wheels``: the wheels transformers 5.23.0, trl 1.16.0, peft 0.21.2, diffusers 0.42.1,
  accelerate 1.15.0 (``pip download``);
* ``diffusers``: huggingface/diffusers ``examples/`` at 58eb52c0803ea9af3abec60841c2a093bdf1f951;
* ``peft``: huggingface/peft ``examples/`` at 5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40;
* ``accelerate-examples``: huggingface/accelerate ``examples/`` at 16cb6eb80dd9;
* ``sd-scripts``: kohya-ss/sd-scripts at 48d368fa5577 (the whole repository);
* ``denoising-diffusion``: lucidrains/denoising-diffusion-pytorch at faed4db28e72 (the whole repository);
* added later, each the whole repository: huggingface/parler-tts (d108732c), huggingface/distil-whisper
  (cc96130f), huggingface/open-muse (64e1afe0), huggingface/lerobot (7427f318), THUDM/CogVideo
  (e519eced), lucidrains/audiolm-pytorch (d65fd151), lucidrains/DALLE2-pytorch (680dfc4d),
  lucidrains/imagen-pytorch (c166739b), showlab/Tune-A-Video (7d4a89a2); then SWivid/F5-TTS
  (2ae2c9bd), XLabs-AI/x-flux (47495425), ostris/ai-toolkit (27a03a91), kohya-ss/musubi-tuner
  (30c658c4), lucidrains/meshgpt-pytorch (2efe2219), modelscope/DiffSynth-Studio (fed7b18f),
  huggingface/autotrain-advanced (b5c98fbe); then lucidrains/e2-tts-pytorch (1028716e),
  lucidrains/magvit2-pytorch (a00519fa), Lightricks/LTX-Video-Trainer (31b12733),
  TencentARC/T2I-Adapter (c408b059), bghira/SimpleTuner (bc8e6ab7).

The git corpora are taken with ``git archive`` from a local clone or mirror when one exists
(``--mirror-root``: a folder holding ``owner+name/repo`` git dirs, or ``owner+name`` clones),
else cloned from GitHub (needs network). ``--write-new`` appends untriaged findings to the
table with the verdict ``untriaged`` so that they can be triaged in place.

Exit code 0 whatever the findings (this is a measurement, not a gate). Results go to
bench/results/ecosystem.json.
"""

from __future__ import annotations

import argparse
import collections
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lint_speed import corpus as wheel_corpus  # noqa: E402  (the same pinned wheels, unpacked once)

HERE = Path(__file__).resolve().parent
TABLES = HERE / "ecosystem"
GIT_CORPORA = {
    "diffusers": ("huggingface/diffusers", "58eb52c0803ea9af3abec60841c2a093bdf1f951", "examples"),
    "peft": ("huggingface/peft", "5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40", "examples"),
    # added after the model work, as code it was not developed on
    "accelerate-examples": ("huggingface/accelerate", "16cb6eb80dd9aa8b4df1a63ef57863e455d53b83", "examples"),
    "sd-scripts": ("kohya-ss/sd-scripts", "48d368fa557731ad0488c07304dfeba8c07910eb", None),
    "denoising-diffusion": ("lucidrains/denoising-diffusion-pytorch", "faed4db28e724735323fa91c70aa9b28a6e1cbac", None),
    # added later, each as code the model had not been run on before (whole repositories)
    "parler-tts": ("huggingface/parler-tts", "d108732cd57788ec86bc857d99a6cabd66663d68", None),
    "distil-whisper": ("huggingface/distil-whisper", "cc96130f6e4cc74cab4545f3c6e7e5c204ced871", None),
    "open-muse": ("huggingface/open-muse", "64e1afe033717d795866ab8204484705cd4dc3f7", None),
    "lerobot": ("huggingface/lerobot", "7427f31801f944f5ec9ce53cda02862ce7d1638b", None),
    "cogvideo": ("THUDM/CogVideo", "e519eced782c08db81f45e5eb40baa45958087ae", None),
    "audiolm-pytorch": ("lucidrains/audiolm-pytorch", "d65fd151075d304bc7b28dfcb736e179b6020fca", None),
    "dalle2-pytorch": ("lucidrains/DALLE2-pytorch", "680dfc4d93b70f9ab23c814a22ca18017a738ef6", None),
    "imagen-pytorch": ("lucidrains/imagen-pytorch", "c166739b03b06fbc2e7c00116ffc81724626ad08", None),
    "tune-a-video": ("showlab/Tune-A-Video", "7d4a89a2b90067e8d805ef1287beb4e4adf37e18", None),
    "f5-tts": ("SWivid/F5-TTS", "2ae2c9bd9b64dab2cb069c4b97e5e7673c521e01", None),
    "x-flux": ("XLabs-AI/x-flux", "47495425dbed499be1e8e5a6e52628b07349cba2", None),
    "ai-toolkit": ("ostris/ai-toolkit", "27a03a91f23eb1b757d5ec2e80ee3e129cfcc350", None),
    "musubi-tuner": ("kohya-ss/musubi-tuner", "30c658c4f4b0bf05038b3346eff9670259b10fc7", None),
    "meshgpt-pytorch": ("lucidrains/meshgpt-pytorch", "2efe22196082df22a0a7027636c2d9ae4d708748", None),
    "diffsynth-studio": ("modelscope/DiffSynth-Studio", "fed7b18fac2ed4cb802796eec91970e7659bccde", None),
    "autotrain-advanced": ("huggingface/autotrain-advanced", "b5c98fbe3aab61101e9c8f7f6c64407cbb68e400", None),
    "e2-tts-pytorch": ("lucidrains/e2-tts-pytorch", "1028716e6a4072f668716687d732a3b123dda4cf", None),
    "magvit2-pytorch": ("lucidrains/magvit2-pytorch", "a00519fa9b9ca58f783d0ab16c9e09579314c9cd", None),
    "ltx-video-trainer": ("Lightricks/LTX-Video-Trainer", "31b12733f51cb16b244d23f6552609f369aed883", None),
    "t2i-adapter": ("TencentARC/T2I-Adapter", "c408b059c36e3f9ce336b66746bd606edaa5483a", None),
    "simpletuner": ("bghira/SimpleTuner", "bc8e6ab7738ce457a2ed8eb2d26cadd91c6442cb", None),
    # batch 5 (2026-11-27): first contact recorded before the value-model work
    "tango": ("declare-lab/tango", "34ecd38898508017ca937508a047b42817d2b070", None),
    "voicebox-pytorch": ("lucidrains/voicebox-pytorch", "d115a997452f278190a2634be500a3db0da5db15", None),
    "rectified-flow-pytorch": ("lucidrains/rectified-flow-pytorch", "26fbed9429771539726664f288e064fd93ca065f", None),
    "cogvideox-factory": ("a-r-r-o-w/cogvideox-factory", "223add1a59440761e91e573921a57fe7b796e17f", None),
    "ziplora-pytorch": ("mkshing/ziplora-pytorch", "6871e5edfed28c933c9f107b4ad9a42c438bd000", None),
    "soundstorm-pytorch": ("lucidrains/soundstorm-pytorch", "8119522e45fd8c5925a70cad0daf94d5012997ce", None),
    "phenaki-pytorch": ("lucidrains/phenaki-pytorch", "9415d4e6e808d941f827c2926e72f43a434eedb1", None),
    "nanovlm": ("huggingface/nanoVLM", "4e0c0961846135c2217f95e54cb4c2d66eb55e42", None),
    # batch 6 (2026-11-27): first contact recorded at 61d0a39, after kinds-from-values
    "pixart-sigma": ("PixArt-alpha/PixArt-sigma", "1ce521afddcc2fab329b35b7374aa86d654e12f7", None),
    "transfusion-pytorch": ("lucidrains/transfusion-pytorch", "3dab4c2e4ff0ebad3a72f731cc103621448e321b", None),
    "naturalspeech2-pytorch": ("lucidrains/naturalspeech2-pytorch", "659bec7f7543e7747e809e950cc2f84242fbeec7", None),
    "onetrainer": ("Nerogar/OneTrainer", "23df3832e8f213d64c337e39f9365ba46e99fed0", None),
    "halos": ("ContextualAI/HALOs", "4831988636b4cbc1c30c0bce78df568cf0f8103b", None),
    "alpaca-farm": ("tatsu-lab/alpaca_farm", "30717ddae735365de756ee2085191b491a71788d", None),
    "pi-zero-pytorch": ("lucidrains/pi-zero-pytorch", "42e1d7f2a915e205f3002bd7d860f638ecffd5c2", None),
    "smollm": ("huggingface/smollm", "a041759883ec7152d18fb985ea49be641a0bceef", None),
    # batch 7 (2026-11-27): first contact recorded at c3525dd, after the library table and evidence
    "med-seg-diff-pytorch": ("lucidrains/med-seg-diff-pytorch", "618e6a48b63e4886129199af8e3e02ff008cbc8e", None),
    "self-rewarding-lm-pytorch": ("lucidrains/self-rewarding-lm-pytorch", "ebeca908cb355dff7ffbdbff54a200e3abdf47ab", None),
    "gigagan-pytorch": ("lucidrains/gigagan-pytorch", "0806433f1e8eadbe888162b5c5a5ab625ce4e0a5", None),
    "videox-fun": ("aigc-apps/VideoX-Fun", "804a4258e2608f855ccaec8fffa279e75a3b89c6", None),
    "champ": ("fudan-generative-vision/champ", "02e5533dcb7027622943d011e7c6ebbe4e1536ab", None),
    "instantir": ("instantX-research/InstantIR", "183ccf559446f472e4a10a276f0ecf908df4adb7", None),
    "spear-tts-pytorch": ("lucidrains/spear-tts-pytorch", "0e6a63807f3b64f0e41ddc76fe2676fb93231f0f", None),
    # batch 8 (2026-11-27): first contact recorded at 0bc11d7
    "ddpo-pytorch": ("kvablack/ddpo-pytorch", "1958463f020112c9a7bc85768d296daacc2e1b4b", None),
    "tangoflux": ("declare-lab/TangoFlux", "164420faa2b3f8a28bb013ccde7006422a616fc7", None),
    "musepose": ("TMElyralab/MusePose", "61c52bd937224a614b3951419b735b639397cb62", None),
    "mmada": ("Gen-Verse/MMaDA", "3cdb8709635beb29f66e4e23cd66060872ac3996", None),
    "catvton": ("Zheng-Chong/CatVTON", "3b795364a4d2f3b5adb365f39cdea376d20bc53c", None),
    "palm-rlhf-pytorch": ("lucidrains/PaLM-rlhf-pytorch", "bd0d0f3893ec62f827fa35e759cb38d748829d51", None),
    "cogvideox-controlnet": ("TheDenk/cogvideox-controlnet", "e21a4a3407eee8f372373fa1593297d7526caeeb", None),
    "d3po": ("yk7333/d3po", "40d31758048f62ff49814eaa0403d820493ad374", None),
    # batch 9 (2026-11-27, third session): first contact recorded at 816c428
    "1d-tokenizer": ("bytedance/1d-tokenizer", "942a96fbdd873780179d1b78d5462911528bf8c8", None),
    "hallo2": ("fudan-generative-vision/hallo2", "58a9aa6c9f66817a6e084f3874cfc01ac24fed3e", None),
    "followyourpose": ("mayuelala/FollowYourPose", "d5834409e6b572af7a9ef91e009675e2147820e4", None),
    "lightningdit": ("hustvl/LightningDiT", "2725fed42a14898744433809949834e26957bcdd", None),
    "musiclm-pytorch": ("lucidrains/musiclm-pytorch", "4a78b41feab25d0ad0f4a1be8ea46b0aaf83d23a", None),
    "q-transformer": ("lucidrains/q-transformer", "d4fc1cb509eb2a3dbe96d8b1a50e0381c58bd134", None),
    "imagereward": ("THUDM/ImageReward", "c1392c6dd0fd6ecd6d416c96959ab744a6d0a8fb", None),
    "bit-diffusion": ("lucidrains/bit-diffusion", "e2c94c655959f80d3ca2a13f75114ac14694eda6", None),
    # batch 10 (2026-11-27, third session): first contact recorded at f4c7777, after batch 9's fixes
    "alignprop": ("mihirp1998/AlignProp", "b22918afd53f254f2ba66eb1233d94121aade5fc", None),
    "diffusiondpo": ("SalesforceAIResearch/DiffusionDPO", "5233e75919f912f3f631958ee4ebb5b5204382d9", None),
    "calm-pytorch": ("lucidrains/CALM-pytorch", "91820506bca2aeb2340db0f8d2f03b00b2abb688", None),
    "vader": ("mihirp1998/VADER", "adaf2ef74763bd84dafaafe1eed98e209fae1843", None),
    "kolors": ("Kwai-Kolors/Kolors", "0fafa56a76b7acf1e147b153d1e7b8fd65f9055b", None),
    "rin-pytorch": ("lucidrains/recurrent-interface-network-pytorch", "775f2ff36ae107ec0247142a7a4eb543518a4efb", None),
    "finetune-qwen2-vl": ("zhangfaen/finetune-Qwen2-VL", "c5385c5ee8cacf141a1aa4555184f1f56fe750cf", None),
    # batch 11 (2026-11-27, third session): first contact recorded at f2638c6, after batch 10's fixes
    "stableanimator": ("Francis-Rings/StableAnimator", "020e7f23a768410e0183ce943397d96a609f4ec1", None),
    "joyhallo": ("jdh-algo/JoyHallo", "dbbe5b2db754ff1e707bdde3fc41a23b585aea17", None),
    "v-express": ("tencent-ailab/V-Express", "6814f7db362dc9e26644162034b4d28c5277651a", None),
    "motiondirector": ("showlab/MotionDirector", "0146a50c1d016dfefb658aca7cc5a1999cdd6cad", None),
    "sd-dreambooth-extension": ("d8ahazard/sd_dreambooth_extension", "4244f6b2cf810a0a4dd83a3534b27d92b82e4c21", None),
    # batch 12 (2026-11-27, fourth session): first contact recorded at 4edbd06
    "text-to-video-finetuning": ("ExponentialML/Text-To-Video-Finetuning", "efbd149c4eae5ceba9684e359f5d059396fee46d", None),
    "autoregressive-diffusion-pytorch": ("lucidrains/autoregressive-diffusion-pytorch", "13d8f531859177a3e1a89b040d283598a293993d", None),
    "pllava": ("magic-research/PLLaVA", "6f49fd281a855c4fa3103595ba2800a4dce7ec88", None),
    "aniportrait": ("Zejun-Yang/AniPortrait", "7f6593fd971c95b65f603c15ef8ce2c3fc7f5404", None),
    "t2v-turbo": ("Ji4chenLi/t2v-turbo", "eaae323f10d136796a33e8f5304ed50e40def570", None),
    "phased-consistency-model": ("G-U-N/Phased-Consistency-Model", "b127277f641f28ad2459647a05f78133e5b3fd34", None),
    "evolutionary-policy-optimization": ("lucidrains/evolutionary-policy-optimization", "18167b80f413f45b55067b38a3430977adfaef67", None),
    "lmflow": ("OptimalScale/LMFlow", "f3597dba134e8bb3d2cfedeaaae6fc7296ace924", None),
    # batch 13 (2026-11-27, fourth session): first contact recorded after batch 12's fixes
    "fastcomposer": ("mit-han-lab/fastcomposer", "b9304a2e7d09ffe4036ebd8ed5656bb08d6a8ca9", None),
    "styledrop-pytorch": ("zideliu/StyleDrop-PyTorch", "3538a60ca79ac57d5ca04be59dcbd13d48f68921", None),
    "elite": ("csyxwei/ELITE", "84b6f2f43957e883ab7a40cf2c3e4519d854a25a", None),
    "custom-diffusion": ("adobe-research/custom-diffusion", "7c19c9a7820d07389f5390e09d7b85d702bafd7b", None),
    "svdiff-pytorch": ("mkshing/svdiff-pytorch", "a78f69e14410c1963318806050a566d262eca9f8", None),
    "animatelcm": ("G-U-N/AnimateLCM", "f873122358c101cd191533adb9cd517899fbfb01", None),
    "animate-anything": ("alibaba/animate-anything", "dca241202348fa2ac68e22e81fca042fe05e3550", None),
    "svd-xtend": ("pixeli99/SVD_Xtend", "609fbf92a3e39a78ed1e2a9e0764a1e912103c48", None),
    "consisti2v": ("TIGER-AI-Lab/ConsistI2V", "152102bbb50bace6eec84fd451b895b6ccc2629f", None),
    # batch 14 (2026-11-27, fifth session): first contact recorded at 4ac3092, the session's start
    "pytorch-accelerated": ("Chris-hughes10/pytorch-accelerated", "54b2dbfd0e4693842e368f7510d92fdab7346727", None),
    "ts-dia": ("ed-00/TS-DIA", "d555a1c486748544ad7e0a1040f6a483b0a0c22f", None),
    "genziqa": ("sh-r/GenzIVQA", "9c0c882391b4d2d650223728b2e2f0be67dfaada", None),
    "audioediting": ("HeCheng0625/AudioEditing", "dab372005a6173f90b6629ae2dfb7c2d9c72009d", None),
    "remove-background-diffusion": ("julien-blanchon/remove-background-diffusion", "ce4ac7f2bea1b654675310d6be2143fc76f34845", None),
    "acceleratormodule": ("ghanvert/AcceleratorModule", "058276c0555e96f4d33048bcca6662131f23ef7d", None),
    "speech-processing": ("tatami-galaxy/speech-processing", "6dfcf92f692599dab6cdb151caee7cfc98d1170e", None),
    # batch 15 (2026-11-27, sixth session): first contact recorded at 6e59e6f, the session's start
    "recai": ("microsoft/RecAI", "1602898505ed32371d431819f346e4e850fd6fcf", None),
    "reward-bench": ("allenai/reward-bench", "05a9005efb607249822c193590c8ecab87c77052", None),
    "archer": ("YifeiZhou02/ArCHer", "7c771a7610cb34e54ba53d69d1fb7337103e5648", None),
    "relation-detr": ("xiuqhou/Relation-DETR", "b485955c72452788240600da6d0f0b8cc49f33c7", None),
    "time-llm": ("KimMeen/Time-LLM", "0045cde1ae0a7e7960b8f2273404eabac0f9c5da", None),
    "k-diffusion": ("crowsonkb/k-diffusion", "4601bf085320592473f681a62808ed873d17fad5", None),
    "scope-recommendation": ("Complex-data/scope-recommendation", "93a07776ca44c1389a23344d0e8062df6a412a30", None),
    "mftcoder": ("codefuse-ai/MFTCoder", "8ba13f44e2036f1412a343bc343dc6cda7383d73", None),
    "prot2token": ("mahdip72/prot2token", "8bd6ef846e21a08d80bf1a84bbbf923f10835a2d", None),
    "flagembedding": ("FlagOpen/FlagEmbedding", "7ed43d67ec03fbe5c31c0992dbfa941fb1860549", None),
    "llm2vec": ("McGill-NLP/llm2vec", "312adcfb578b4023bfc9d3bcc83b6b87448ab059", None),
    # batch 16 (2026-11-27, seventh session): first contact recorded at e40840b, the session's start
    "meteolibre": ("meteolibre-dev/meteolibre_model", "b02f8029f0b612544c6348d6d13fb8bee486c0e6", None),
    "re-grpo": ("researchim-ai/re-grpo", "9c8ad5e526ac8416fa176a0320a1caf3f800e517", None),
    "rir-dm": ("Sinabroslowly/RIR-DM", "f30173eb2ce031b1d1ee602a1d9cebc31b9d622c", None),
    "huatuogpt-ii": ("FreedomIntelligence/HuatuoGPT-II", "88ddf9abc77651e108a2f5abbe38789c8e33efa7", None),
    "diffbir": ("XPixelGroup/DiffBIR", "3f8b5304245ba0ffd6f1995e51c27c3c72d7618f", None),
    "t-zero": ("bigscience-workshop/t-zero", "7a699e3ba15c1aeccf5b99cf2e2df3790f0dffce", None),
    "u-vit": ("baofff/U-ViT", "ce551708dc9cde9818d2af7d84dfadfeb7bd9034", None),
    "diffusion-e2e-ft": ("VisualComputingInstitute/diffusion-e2e-ft", "4ff5aad00f686e08d49e5ee55054e161dd0a7458", None),
    # batch 17 (2026-11-28, eighth session): first contact recorded at 1236302
    "summarize-from-feedback": ("vwxyzjn/summarize_from_feedback_details", "ee77a9abc31f5338365ee087945c5bcafac7f1ca", None),
    "moss-rlhf": ("OpenLMLab/MOSS-RLHF", "4865d826fc6705dfdf1894aede00b4c81dabb24b", None),
    "tamper-resistance": ("rishub-tamirisa/tamper-resistance", "19de233f652078f82dd45422331498ad431ab2da", None),
    "unicrs": ("RUCAIBox/UniCRS", "f7d8f95104d6eba5371cfa845b243057a632079e", None),
    "rr76-study": ("rapidrabbit76/study", "d4958858a7e5e00878a29debcf61a4258e346347", None),
    "hwa-unetrv2": ("JeMing-creater/HWA_UNETRV2", "84ca9fa7f8dd6781045fde066bcc2db42e8c7264", None),
    "speechtokenizer": ("ZhangXInFD/SpeechTokenizer", "30c96fb32a9fc06a2258c98119e237def051e46c", None),
    "dmd2": ("tianweiy/DMD2", "8d8fa55633d47cfb81bbc7a892e7248f9518763f", None),
    "osediff": ("cswry/OSEDiff", "fcc4f09c7ed66a9bc0ba9433940d76b343142426", None),
    "lgm": ("3DTopia/LGM", "fe8d12cff8c827df7bb77a3c8e8b37408cb6fe4c", None),
    "openlrm": ("3DTopia/OpenLRM", "3108b6902d27912e1dcdce76970eab51436f5b21", None),
    "rdt": ("thu-ml/RoboticsDiffusionTransformer", "deb71d82278780d83253a28d9b904085559be400", None),
    "umi": ("real-stanford/universal_manipulation_interface", "d095ba9590df789df5189eea5ee7e431689038a6", None),
    "openke": ("LuYF-Lemon-love/pybind11-OpenKE", "0776cc0b1afe01c386375192b51651cb2d3c8a88", None),
    # batch 18 (2026-11-28, ninth session): first contact recorded at 881b751, the session's start
    "aixue-rlhf": ("xuwangzi/AIXueRLHF", "9b8df96cc1183891693aa9e0d9aa6802ac3e7eb0", None),
    "diff-from-scratch": ("MiniXC/diff_from_scratch", "996772858a8e9c6f760ca774b96b5dbd39606f02", None),
    "fullstack-dl": ("seilk/fullstack-deeplearning", "c38d973cad683e252f8d9454c3c61b7104e86267", None),
    "sampling-mixed-gaussian": ("KevinRojas1499/Sampling-Mixed-Gaussian", "f1641668d96688b87b231fd784d2e3133b74f4ff", None),
    "dpo-lora-hnet": ("linfeng-du/direct-preference-optimization", "e5bcb5972d6691350055b7a904bc8319a0e252e8", None),
    "flow-grpo": ("yifan123/flow_grpo", "ac4c86e8cae021841f1fde853d340e0db67690dd", None),
    "ttts": ("adelacvg/ttts", "53de057d6b2d57416fa8f263111af046609196f7", None),
    "ivideogpt": ("thuml/iVideoGPT", "2ae0381ec0b61f17f3fa56a47ae6739c7ef35915", None),
    "maskbit": ("markweberdev/maskbit", "5ea3d733c62625eaf86dab8364bdb7e6e71def99", None),
    "amplify": ("chandar-lab/AMPLIFY", "2fd2c089c8956a85293048fe34bc00fb29b838ff", None),
    "llm-rlhf-tuning": ("Joyce94/LLM-RLHF-Tuning", "d17944bc84325bf7a685ea798609babf9c03b008", None),
    "otter": ("Luodian/Otter", "1e7eb9a6fb12ef410082e796c463b99495637b85", None),
    "eval-medical-dapt": ("taekb/eval-medical-dapt", "908bb862b2e377fb91ccd888267cb7506352d36f", None),
    # batch 19 (2026-11-28, tenth session): first contact recorded at c87c63b, the session's start
    "music-source-separation": ("ZFTurbo/Music-Source-Separation-Training", "9ba8a12d89c54193376e1a872a3f1f60249c5d1a", None),
    "scmamba": ("23AIBox/scMamba", "4414f3ccf0ee633150049c84166b03548483441e", None),
    "grounding-dino-finetuning": ("Asad-Ismail/Grounding-Dino-FineTuning", "ee4ea8ac5fa74a2f8c5e3253ee856f98be442913", None),
    "u-dit": ("YuchuanTian/U-DiT", "c9c81e4e232220cb6372e92d710772aaf1ca4e14", None),
    "vits-accelerate": ("quanghuyn94/vits-accelerate", "342e2e6d24b587259a7f0b57f8a804e24ac9b21e", None),
    "rusiglip": ("Technolog796/RuSigLIP", "727612ae44b9b112547a742b79b1e168e5ef6bf6", None),
    "llm4rec": ("yaochenzhu/LLM4Rec", "cd3ad4e786c29106e6828030ca640cb8336bfff8", None),
    "sdora": ("ZhuochengHe/SDoRA", "07e02249ce7c083ef46fdb80dee6bde4b283ae08", None),
    "piano-transcription": ("qiuqiangkong/piano_transcription", "d6f01ac8fdf75901c6b89600fbd1ce187e80c18e", None),
    "chestxray-text-embedding": ("Yushin-L/ChestXrayWithTextEmbedding", "c445c6cdfcdb86886009bf77147d90c07677607c", None),
    "digirl": ("DigiRL-agent/digirl", "53320f6f45a3fb144e431d679c5254cb89ed0a93", None),
    "genpercept": ("aim-uofa/GenPercept", "afc1578b05dd221bc012e5950dca802dcb248503", None),
    # batch 20 (2026-11-28, eleventh session): first contact recorded at 5eb8ad2, the session's start
    "medical-segmentation": ("luisleo526/medical-segmentation", "90937325c09b6a30276f8c176d7c167b4d384ff0", None),
    "fastspeech2-mls": ("elu-lab/FASTSPeech2", "2a78242c8a7b0974499baa2680efd70fc2747322", None),
    "parti-vqgan": ("pranoyr/parti", "15841aa495dee0c01d36cfae3ba8ec43ea058e07", None),
    "lightweight-gan-doodles": ("kurchi1205/LightweightGAN", "f14e8ac77358bbd41d6ef8d3fe8f0e475010fe95", None),
    "omega-net-tem": ("mallocobject/Omega-Net", "611559f908d37dd98f3fc688e567a9c3d4f29b2d", None),
    "unified-video-action": ("ShuangLI59/unified_video_action", "288e154ed70ab7f6a3a9198574c5a75032a195fd", None),
    "s3diff-sr": ("ArcticHare105/S3Diff", "6a2e0a47676f2f01fccdfd4e940077d3038d953e", None),
    "pt2-bert-benchmark": ("Gladiator07/PyTorch-2.0-Benchmarks", "19abfc72ffa299ad76a97d157ce0f0bac72b744a", None),
    "omni-scene-gs": ("eacsai/Omni-Scene", "f992bd61942c8ba9545edd902ecca43fa79227a7", None),
    "review-analyst-vi": ("nguyenvanson1998/Review-Analyst", "0ceaea7ac753da2bbcfd473afdcc891cebf13871", None),
    "tfg-time-series-transformer": ("AntonioLuisGH/TFG_TST", "44875db77ae4ec96eb59c6c3833454831632342e", "TFG_Code"),
    "pdiff-param-diffusion": ("NUS-HPC-AI-Lab/Neural-Network-Parameter-Diffusion", "fa86d3c68dc55d5317512718ad0699df924cdb14", None),
    # batch 21 (2026-11-28, twelfth session): first contact recorded at a72ef6c, the session's start
    "yarn-long-context-finetune": ("jquesnelle/yarn", "995db5b575e75230b3384d658f8b944c9662f775", None),
    "lm-human-prefs-ppo": ("vwxyzjn/lm-human-preference-details", "ccc19538e817e98a60d3253242ac15e2a562cb49", None),
    "nanot5-pretraining": ("PiotrNawrot/nanoT5", "1375b389d33ab4f34754a9fca62e4cfa1dd52379", None),
    "timm-imagenet-classification": ("cnut1648/accelerate_timm", "d5fe05ebc1f020cf1d3a092a1e17fdf29c22c127", None),
    "spectral-semantic-segmentation": ("lukemelas/deep-spectral-segmentation", "b89b6506cd6c300e6c954d12f27d5215362b7ca1", None),
    "omnigen-image-generation": ("VectorSpaceLab/OmniGen", "d4752019ae16741dc3801fd4989432aad4c81a4f", None),
    "vits-tts-finetune": ("ylacombe/finetune-hf-vits", "6f3f51f4d667f5c3eef89484d151ffd39d2c2b89", None),
    "facodec-speech-codec": ("Plachtaa/FAcodec", "01ccfa99d1a973e9d56bcd0dbbd3d1c366165209", None),
    "lamp-video-motion-diffusion": ("RQ-Wu/LAMP", "33cd87a1b67bd7b469ed2a0ca8f3a013dde3cb5e", None),
    "diffullama-diffusion-lm": ("HKUNLP/DiffuLLaMA", "c17e897f6476c174b4623da594e4c65554f1613d", "DiffuLLaMA-training"),
    "xrag-retrieval-lm": ("Hannibal046/xRAG", "121fa4180a8c1fa0ec1af5901d879452e5c9ce89", None),
    "agentgym-behavior-cloning": ("WooooDyy/AgentGym", "3ef9235d23e68e7c2920c5422ad957dc8ced5c6c", "agentenv"),
    # batch 22 (2026-11-28, thirteenth session): first contact recorded at 4b46a35, the session's start
    "dilightnet-relighting-controlnet": ("yym0329/diffusion-project", "634e55bd421eed5091105028a8e379fd4da34aa8", None),
    "uniem-embedding-finetune": ("wangyuxinwhy/uniem", "f76acf9287917cbb64ce7e6d36e18afaf4c452fd", None),
    "brain-tumor-seg-classify": ("JeMing-creater/ZTomorTrain", "f012791dff806c8de3e8cd948e60f755d22339d7", None),
    "motion-consistency-video-distill": ("yhZhai/mcm", "885b77626935660384d8051ea7ec228abb506d28", None),
    "aqualora-watermark-controlnet": ("HanhaiNotHai/AquaLoRA_ControlNet", "b136b97990e6deecac4c8d2ecccd35eef6d0ba5a", None),
    "indextts-gpt-multigpu-finetune": ("Ksuriuri/index-tts", "c3b0309c262490d67e617c05598c2eee6ab437f3", None),
    "llm-alignment-sft-dpo-rlhf": ("nikhil-lalgudi/distributed-llm-alignment", "4fa41d709cc1c5810e95711a2c1bc88461c64530", "distributed-llm-alignment"),
    "recurrent-parameter-generation": ("MTDoven/Recurrent-Parameter-Generation", "a197f7c50adfe64cd8d1135533aff6cdefe8acc6", None),
    "lora-e5-semantic-search": ("aulukelvin/LoRA_E5", "153446082dd250eb521ae058d8eb0fb8a044f96c", None),
    "sotopia-social-rl-ppo": ("sotopia-lab/sotopia-rl", "2ebb14ea4802c4b8cb3def40e9a0f9a0398265c5", None),
    "lkgd-svd-joint-lora": ("caoql98/LKGD", "0eb0ff533db6c2e986c1b70b5aa11ace1d6b26a5", None),
    "beautifulprompt-sft-rm-trainer": ("alibaba/EasyNLP", "a4ee9568fa094f5825346f3acd0d65b15f1e3a95", "examples/BeautifulPrompt/beautiful_prompt"),
    # batch 23 (2026-11-29, fourteenth session): first contact recorded at 920bb2e, the session's start
    "rag-retrieval-embedding-reranker": ("NLPJCL/RAG-Retrieval", "4193c8c11efe0119d54d17c1f058f3f8b8047727", None),
    "chatlm-mini-chinese-pretrain": ("charent/ChatLM-mini-Chinese", "2696eb8d1601188bef57fe39f884463ea8dd7182", None),
    "ezaudio-text-to-audio-dit": ("haidog-yaqub/EzAudio", "1a5b1e8d403956f417566ac373f745b85831dbde", None),
    "distill-sd-unet-knowledge-distillation": ("segmind/distill-sd", "c1e97a70d141df09e6fe5cc7dbd66e0cbeae3eeb", None),
    "audio-diffusion-mel-unet": ("teticio/audio-diffusion", "049614dffd5b089ebea9664aaa668bc5d8d10181", None),
    "uce-single-cell-embedding-eval": ("snap-stanford/UCE", "8ead6e07af0c80f75653598138bb704e865b45c8", None),
    "ses-adapter-protein-finetune": ("tyang816/SES-Adapter", "ec5bf619d665435c161493402495f89c95a2e756", None),
    "eschernet-multiview-novel-view": ("kxhit/EscherNet", "569240f81d729aae413167a898c2af21dc969dd2", None),
    "trol-vlm-benchmark-eval": ("ByungKwanLee/TroL", "7a71dfb9acf1f5339ce29c30f9e2b07faa7757ca", None),
    "supervoice-flow-tts": ("ex3ndr/supervoice", "2840683d9ef8ff9075e212199c17d14febecb265", None),
    "generative-rec-benchmark": ("cynthia-shengjia/Generative-Recommendation-Benchmark", "fbbb1106dd33313d77aaa575dc28e35a7c48ec95", None),
    "accelerate-asr-conformer": ("sooftware/accelerate-asr", "9ed557186a3534fa66327eeb4b6e927882fd9e60", None),
    # batch 24 (2026-11-29, fifteenth session): first contact recorded at 7af43ad, the session's start
    "eagle-speculative-decoding-draft-head": ("SafeAILab/EAGLE", "cb7e0841fe0c206c6ed74a197ad5e2a1f13f5a2b", None),
    "rqvae-generative-retrieval-recommender": ("EdoardoBotta/RQ-VAE-Recommender", "0e4ae0c036c291cf6c900ea198641341553080a0", None),
    "avdc-video-diffusion-robot-planning": ("flow-diffusion/AVDC", "176fbe1352a869d77855fe17ab0ddc82c440dc4b", None),
    "tdpo-temporal-diffusion-reward-finetuning": ("ZiyiZhang27/tdpo", "e9c58cf65b47ab4e50d31fe60b371591765271ba", None),
    "rankgpt-llm-reranker-distillation": ("sunnweiwei/RankGPT", "0d62bc3855c7c118048a7c47c18e719b938e291a", None),
    "async-rlhf-online-dpo-rloo": ("mnoukhov/async_rlhf", "55985292adc6f3a0df575d454253407268de1406", None),
    "consisid-identity-preserving-video-gen": ("PKU-YuanGroup/ConsisID", "60429e4b0d24d36ce8df7fb58f7ab42b86e2b70e", None),
    "geowizard-diffusion-depth-normal": ("fuxiao0719/GeoWizard", "deee629b10baf944452a99a393ac818fbec86363", None),
    "diffrhythm-latent-diffusion-song-gen": ("ASLP-lab/DiffRhythm", "28ad63c0f096fe2ee258bcabbcf081d5d9366afd", None),
    # batch 25 (2026-11-29, sixteenth session): first contact recorded at 7cb1852, the session's start
    "graph-llm-node-classification": ("W-rudder/GLM", "745057aa90d90852b32df5a8d444d72ee211f81c", None),
    "mesh-generation-3d": ("OpenMeshLab/MeshXL", "2fa9034237b77c536cc033202c4a3e9218fe7a1c", None),
    "fmri-image-reconstruction": ("MedARC-AI/fMRI-reconstruction-NSD", "6b30ea53c0f98b0a79b8f6828b6787a5913fd08d", None),
    "offline-rl-decision-transformer": ("grahamannett/inctxdt", "3e4f3e8157d22cfefce33002a559ada091f4c268", None),
    "speech-restoration-gan": ("yukara-ikemiya/Open-Miipher-2", "1ef3be61e6cfd8d2db226009bb3259917ffb91b4", None),
    "plant-species-classification": ("geranium12/plant-clef-2025", "556afb418ef046d85f77520e74dcd35f009341cc", None),
    "single-cell-foundation-model": ("ma-compbio/Heimdall", "dbfc4aa55f46d5aed1f340dd486bf20a01412895", None),
    "skin-lesion-segmentation": ("ScholarChen20/Swin-UMamba-main", "e06d27a6a87bac7447d8a6fb9afc95d0edcb3a5f", None),
    # batch 26 (2026-11-29, sixteenth session): first contact recorded at 459828a, after batch 25's fixes
    "vlm-policy-ppo-crafter": ("giobin/VlmPolicyEsann24", "b73a8a0173af200db627a34ceba3523d9d1e6df9", None),
    "gan-zoo-training": ("xyfJASON/gans-pytorch", "8ba548da0a8a1080991ded77b87aa46c1b5a9dff", None),
    "multimodal-fusion-omics": ("josiahbjorgaard/mca-paper", "1883ef889905f6c3c929af18a21d854e7272ad4d", None),
    "crystal-property-pretraining": ("shrimonmuke0202/CrysLDNet", "e227d13860697828cf55eeb7f53a99ec787e150f", None),
    "code-llm-humaneval-mbpp-eval": ("deepseek-ai/DeepSeek-Coder", "2f9fd85927c669dae3c0fbb2d607274023af243e", None),
    "pii-token-classification": ("jashdalvi/PII-Data-Detection", "4f96b3cdde4724418e25e887a6fac85c7578ae47", None),
    "timeseries-anomaly-contrastive": ("alibaba/sreworks-ext", "499542e693ccddedcc797191b7924d09e4241577", "aiops/ContraAD"),
    "speech-deepfake-detection": ("KORALLLL/AASIST_SCALING", "28dbcd6bbb738a2a8d7d2288e0628daab5bb9ce4", None),
    # batch 27 (2026-11-29, sixteenth session): first contact recorded at 5038e28, after batch 26's fixes
    "fashion-multimodal-retrieval": ("xiangyu-mm/UniFashion", "f01a46fb7ed08255fcb52a943d9bcefde03c8eaf", None),
    "video-action-recognition": ("nateraw/pytorchvideo-accelerate", "c6bb048ca5f686ac7c4ec3ed60305dafb1faf28d", None),
    "ct-volume-clip": ("ibrahimethemhamamci/CT-CLIP", "a2a155c601987820433c01db69b64d701d3d229d", "scripts"),
    "small-llm-pretraining": ("SulRash/minLLMTrain", "99be6ffe6f6a764481d422669eaa15f5a25506b7", None),
    "machine-translation-inference": ("ikergarcia1996/Easy-Translate", "1b3410b64b60449bcad13ba2baae23dfff99e338", None),
    "knowledge-distillation": ("yoshitomo-matsubara/torchdistill", "3e4373c45214c5c56eebac481d5bfe8b8735aa05", None),
    "rhythm-game-beatmap-generation": ("OliBomby/Mapperatorinator", "3b7c69aefa0a002f05e451693b78ff4c8fee80f4", None),
    # batch 28 (2026-11-29, seventeenth session): first contact recorded at a8cc14f, after batch 27's fixes
    "information-extraction-toolkit": ("Spico197/REx", "31e142714c456a282dbe84773132bce06c409b44", None),
    "llm-sequence-labeling": ("ikergarcia1996/Sequence-Labeling-LLMs", "176d32dbd34c6b633a93b9ee249485b8b08cdb0c", None),
    "medical-vision-language": ("jbdel/vilmedic", "0642c4b933406588a589dac3333b2eb0326fe63c", None),
    "lung-nodule-classification": ("dobe0715/LUNA25_MClab", "a65e4256176db80246f1a1dbd53d1fa85618528d", None),
    "plant-disease-graph-network": ("BeObm/PlantGraphNet", "36a28ad08dc823ecd6f7f0d23dd4dd29a0beb90d", None),
    "imagenette-classification": ("amaarora/imagenette-ddp", "801f6cd5236fdecfe941a5018d2c3e195433d372", None),
    "knowledge-graph-t5": ("apoorvumang/kgt5", "c527e0d847c43cc0a3fa8d8304c774bbe0cc1b6a", None),
    "code-model-toolkit": ("salesforce/CodeTF", "0faedf0d636f0d186789facd8049c0b1b59f4f4b", None),
    "human-attention-alignment": ("serre-lab/Pseudo_ClickMe", "7a784bf80fc296e74e77ca2604652450da7203be", None),
    # batch 29 (2026-11-29, seventeenth session): first contact recorded at 263557b, after batch 28's fixes
    "offline-rl-language-ilql": ("Sea-Snell/Implicit-Language-Q-Learning", "0dc556150bfbdca5e1e6ee322c9126486c2162f7", None),
    "instruction-to-speech-codec-lm": ("thuhcsi/VoxInstruct", "e953295485bd88a293b37735c98b362554f4635b", None),
    "protein-ligand-docking-diffusion": ("CAODH/SurfDock", "6420335c79c7dc83157ffc2ea8e15f84f4bf5e5c", None),
    "diffusion-step-preference-optimization": ("RockeyCoss/SPO", "27a86428edcff3b25dcce8001be94a7a01608f58", None),
    "sam-feature-matching": ("TwSphinx54/SAMatcher", "db4592ca0a7bde9c83e0ff241c52723a9ecc2376", None),
    "medical-llm-benchmark-eval": ("FreedomIntelligence/CMB", "6c8ece46097dae736c6805dd3b831e1a38c08971", None),
    "medical-reasoning-llm-sft-ppo": ("FreedomIntelligence/HuatuoGPT-o1", "2c8d7fcaadaad44000eb1765cbe36a09968a0164", None),
    # batch 30 (2026-11-29, seventeenth session): first contact recorded at bddc30e, after batch 29's fixes
    "rl-vehicle-longitudinal-control": ("dorstimagry/ControlNet", "7aad2130cb1b039a1ff504d543959dac1d9905c7", None),
    "knowledge-graph-reasoning": ("MDrance/SQUIRE", "629eada7da8901a29c114702fe12c6ca726241e9", None),
    "diffusion-tts-vocoder": ("icedoom888/Conditional-Diffusion-Audio", "bb6b305d5eb78c2f10865c4ab0a269e9c1d77f6c", None),
    "llm-memory-augmentation": ("RPegoud/Hercules", "27e42238c8f3d9b8ed43c7b8960316fa6a238a2d", None),
    "point-cloud-diffusion-pretraining": ("wdttt/PointSD", "8e1471b29bd903324464e2fae9f8e6a0b2eee3d1", None),
    "timeseries-causal-discovery": ("R0oup1iao/GeoDCD", "3a320039573f58d3e73cf0a67febc604fdee3688", None),
    "handwritten-ocr-finetuning": ("Hrazhan/kurdish-ocr", "172c4c75b6f8618c1277445217b95347ca643161", None),
    # batch 31 (2026-11-29, eighteenth session): first contact recorded at 3361226
    "fine-grained-rlhf-ppo": ("allenai/FineGrainedRLHF", "a1469d4eba0b3754bcb343beb88f0aca24bf4848", None),
    "logic-program-learning": ("phuayj/delta-lfit-2", "ee8f02f5db9773d13597043bb0f2ec441728069c", None),
    "handwriting-dit-diffusion": ("thaibabao2002/HWT-DiT", "e29d07a8a9b857550a09dc08eb7d822ea1118ef2", None),
    "graph-variational-flow-matching": ("vincenttsai2015/VFM_CatFlow", "a51ed33f98fd375bd388ac33703361e162ead8f9", None),
    "cross-view-geo-localization": ("buaa-colalab/GAGeo", "f6585cbad28e3a752bd31804327b801a49d3b7f0", None),
    "music-audio-language-model": ("xiquan-li/TinyMU", "385133d3df4460b749d3d774c93edd4016bd4bac", None),
    "t2i-diffusion-dense-reward-rl": ("Shentao-YANG/Dense_Reward_T2I", "863a3834536ebefdc620fb56fc88b1b7a3d5e7e9", None),
    "depth-completion-kbnet": ("NoWorryy/depth-completion", "9ce7332049c91dea6f4d27168cc38a22fd69a373", None),
    # batch 32 (2026-11-29, eighteenth session): first contact recorded at d395faf, after batch 31's fixes
    "colpali-retrieval-distill": ("VijayRavichander/colpali-distill", "8884d7a5cb8df32e49483c12a957f20e93284ca8", None),
    "detr-accelerate-deepspeed": ("watermeloniiiii/detr", "95ed03ba29fbb0b5a0a6c9f53d449fe5fa0a795a", None),
    "moe-fsdp2-scattermoe": ("foundation-model-stack/moe-distributed-training", "c10701f8ad4069949b7b74575b8d988b287d237c", None),
    "radiology-report-dacg": ("Catfields/DACG", "c1d1602477f5af28566df2eb4b43d46b196351e4", None),
    "speech-emotion-recognition": ("dookooni/Speech-Emotion-Recongition", "915ab38b37f727a49ec5d6583e4c407de6330788", None),
    "pbr-texture-flow-3d": ("stevenGetsby/G-PAINTER", "eb6d5266a81d79098c59fa636532f8da064dce98", None),
    "timeseries-qa-itformer": ("Pandalin98/ITFormer-ICML25", "b80142fc8b6ab2be8f148f3bb7a7534bb32f318b", None),
    "protein-text-clip": ("finnlueth/prostT5-CLIP", "d335cdc2565ea58b8593dc512080428aa6653260", None),
    # batch 33 (2026-11-29, eighteenth session): first contact recorded at c7c1a49, after batch 32's fixes
    "vespa-mamba-diffusion": ("feizc/Vespa", "657f8e0ad99bad68c22ab0b950afc8620ad8627f", None),
    "lead-accom-separation": ("cyruss081115/LeadAccomSeparation", "db842fe1add2ade1385bd4f6069922f4ffcf6f20", None),
    "tsukasa-speech-tts": ("seichi042I/Tsukasa-Speech", "d4ac5c2fc01cb0068249fe3b9d700ff24f81b69a", None),
    "miniopenllm-pretrain": ("zclzcl0223/MiniOpenLLM", "737654c765fe66632e941b5abbac7041dd53bdec", None),
    "trading-ts-forecast": ("gemlorg/Thesis-Trading-LLM", "072f5b58770f03392ee0157a22167d940c3c6c19", None),
    "densetrack3d-v2": ("Binyr/densetrack3dv2", "f2689b522af77cb34dc697033c560e1b65515e5c", None),
    "aigc-distortion-detection": ("mightycatty/AIGC_imagery_distortion_detection", "4094b8705c1ca6bb32c24e984e189760920441f4", None),
    # batch 34 (2026-11-29, nineteenth session): first contact recorded at 2e787d0, after batch 33's fixes
    "word-problem": ("jopetty/word-problem", "8f910f92e1c70455dcd9376f56032dfc55126188", None),
    "eeg-to-text": ("zenon009/EEG-To-Text", "128c2be8eb1b3624b5f7d1342342746143da5267", None),
    "rl4vlm": ("RL4VLM/RL4VLM", "b989b57400ad1010306fe170a547b57e7d21389c", None),
    "picoaudio2": ("HiRookie9/PicoAudio2", "e8e726836fc41d20066c7f72b30d1248b0678343", None),
    "cfld": ("YanzuoLu/CFLD", "f2ea2a78f4dbee8effd37364f0fc134d1f9fb3ec", None),
    "starvla": ("starVLA/starVLA", "0ed0aad2c83f587714f6167ef60cf7218b786590", None),
    "ptm-mamba": ("programmablebio/ptm-mamba", "49c223fa87b9d9bcb5bc6e664ce223dedde58b61", None),
    "continuous-cot": ("PlanarG/Continuous-Chain-of-Thought", "fc42405ef96cac7e5bdfe28b1355bd20f37caec1", None),
    # batch 35 (2026-11-29, nineteenth session): first contact recorded at ff30a32, after batch 34's fixes
    "pbgnn": ("yxwu21/PBGNN", "e9da59e9301711e05593f207e1559844fdbb4b42", None),
    "point-sam": ("zyc00/Point-SAM", "c14d3931b71ac6c73793a2e64d5be870d9eedc8a", None),
    "standing-deadwood": ("jmoeh/standing-deadwood", "7d1715c160e0e78de7aa98609b0081dc6661b6cd", None),
    "smalltts": ("smallbraineng/smalltts", "9ececbda023ba95a1138e265819e494900d63bf5", None),
    "motionmillion": ("VankouF/MotionMillion-Codes", "be53e625b37900eba32c8e7c881da5189fb4f332", None),
    "confit-protein": ("luo-group/ConFit", "7f5a453e4ff3ffc37a2cd04449cd571973382fd9", None),
    "cine-fm": ("matt-bendel/CINE-FM", "77145ec23908ac47efbc6648391142bdb0a38684", None),
    "finstar": ("seunghan96/FinSTaR", "99e438ec54cdcdcfaeac483d7eeffab76b9f517c", None),
    # batch 36 (2026-11-29, nineteenth session): first contact recorded at b0cc07e, after batch 35's fixes
    "s-plm": ("duolinwang/S-PLM", "d27da1b18ea864ee617d4d4da87d953580dab0c4", None),
    "pc2-point-cloud-diffusion": ("lukemelas/projection-conditioned-point-cloud-diffusion", "64fd55a0d00b52735cf02e11c5112374c7104ece", None),
    "dpmtse": ("haidog-yaqub/DPMTSE", "efe5b3e0fbadb6875b6f9b4b62bb9c1243ca3fe1", None),
    "toms-net": ("SSongXujie/TOMS-Net", "fc46dfb55369d953bdba4de7c1975effc8246e3d", None),
    "benetech-mga": ("rbiswasfc/benetech-mga", "237bd0b296b6b40a175a4b52c1e49fb1774c439c", None),
    "airrep": ("sunnweiwei/AirRep", "f7f2ff1ade0eb6d338a8ab8c2a2f0f874e2237e0", None),
    "umbrae": ("weihaox/UMBRAE", "ea5dab0042ae0c6d089379f39cdd46cb2973dd00", None),
    "genret": ("sunnweiwei/GenRet", "a1d80e1506de7e4d5b21afa7c10e08ebff8c104e", None),
    # batch 37 (2026-11-29, twentieth session): first contact recorded at 731616d, after batch 36's fixes
    "mini-music-tagging": ("qiuqiangkong/mini_music_tagging", "4362ecb54876d3d8c7ee3add8778321512e93eeb", None),
    "lmtrajectory": ("InhwanBae/LMTrajectory", "cdf21384dffeb3077ef3af3926d3ecb0c588526c", None),
    "signal-diffusion": ("joshsanz/signal-diffusion", "aff245df24ee25742d54a3d60cc9e423f532a1c9", None),
    "gencp": ("AI4Science-WestlakeU/GenCP", "1b0522338cf139b615e1395e8e9da82d3edabbe9", None),
    "showvla": ("ybpy/ShowVLA", "9d0027c3be4d126b7f9d4eabef242980d46cb5bb", None),
    "ka-mig": ("GuotaoLiang/KA-MIG", "0b4ceb150ef64207af65e2c9227c9b256a3ef094", None),
    "llm-science-exam": ("rbiswasfc/llm-science-exam", "2c2a24f6d21a512566af058c7a1676751fd16401", None),
    "rts2s-dg": ("mailong25/rts2s-dg", "a1b8a9584ffc753bd75e7bd687f2303dfe40c601", None),
    # batch 38 (2026-11-29, twentieth session): first contact recorded at 1733835, after batch 37's fixes
    "sign2vec": ("JSALT2024/sign2vec", "61e903032855c399b0f615d45923c4895cf10899", None),
    "mncdv3": ("EricYu97/MNCDV3-ALL", "4400445afb8a711d4abd73464b5b210ee72f0564", None),
    "mimictest": ("EDiRobotics/mimictest", "8505b07ef8ec1e5bf77d04dc221a88885701594f", None),
    "ionosphere-diffusion": ("fpramunno/ionosphere_diffusion", "ffdb62a7a355f315c7495ff75c13312c697b7e32", None),
    "gnn-diffusion-stock": ("yigit-uslu/GNN-Diffusion-Stock-Forecasting", "b441c0178c4a5853b685ee8a42bbb1b124332477", None),
    "yield-elicitation": ("infosenselab/yield", "4700a279fabfe677945bf46ef22e67a19c5c156e", None),
    "multiview-behavior": ("PPWangyc/multi-view", "b00b82719b0f8fa1e69d2adf081b36c5067bce59", None),
    "generate-to-ground": ("Felix-012/generate_to_ground", "699364ad02f61b9bf9f9af02f9e056a2ada87716", None),
    "simclr-audio-events": ("kligvasser/simclr-audio-events", "01ef47262da53916a1fd3d4849b5850e3fe0e169", None),
    "elias": ("nilesh2797/ELIAS", "724b5fefd519eafef82465b9be7c9da5fe8d6e4e", None),
    # batch 39 (2026-11-29, twentieth session): first contact recorded at 6e11dab, after batch 38's fixes
    "soda-mutation-testing": ("yifan-CodeDir/SODA", "2221c3015651ded2c0fc693f52be326cd1618392", None),
    "blip2-vqa-finetune": ("Flora-jia-jfr/blip2_finetune", "59164ef41eab6e042f7c3ceae36fecdd6f5133e3", None),
    "kb-binder-kbqa": ("Oran-Ac/KB-BINDER", "6826d51ace06178ce2c7b27fa187b16f1597714a", None),
    "irformer-vis2ir": ("CXH-Research/IRFormer", "bb7d39f752b919b2bdd95724274237a5a09821cb", None),
    "taudio-temporal-loc": ("inkitori/taudio", "e191d739fc3672333284c7e816df61136f62f799", None),
    "tokenfold-structure": ("timodonnell/structure-search", "b8e6f58083ee9867a28debd8c5927c2f0ff2f1f8", None),
    "mycdm-cognitive-diagnosis": ("BlackieFC/MyCDM", "54abd595ae442218e0f693ad1a4a4489208c4bd2", None),
    "finance-synthetic-data": ("ncograf/synthetic_data", "c8874c7d74e91c0db26128ba4c88f7aea73c3735", None),
    "rat-vocal-separation": ("otanaaa/BME_10_project", "d68b317a933eebff54a22044fe26a439881b3143", None),
    "holomotion-humanoid-rl": ("HorizonRobotics/HoloMotion", "71ab7e976de23aa9bb351030dd61b05426d3443c", None),
}
CORPORA = ["wheels", *GIT_CORPORA]
# for whole repositories: only the sources (a snapshot may lack its large binary files)
_SOURCES = (".py", ".ipynb")
_COMMAND_FILES = (".sh", ".bash", ".md", ".rst", ".txt", ".slurm", ".sbatch", ".yaml", ".yml")
VERDICTS = ("TP", "FP", "judgment")
# a real bug of the catalog's classes found by reading the code, that the linter did not report
MISSED = "missed"
# the triage of each corpus's first lint, made before any model change for it: never edited
FIRST_CONTACT = TABLES / "first-contact"
# an Accelerate program in the sense of the precision target: it constructs an accelerator
ACCELERATOR_CONSTRUCTION = re.compile(rb"\b(Accelerator|PartialState)\s*\(")


# -- corpora ----------------------------------------------------------------------------------
def _git_dir(repo: str, mirror_root: Path | None, cache: Path) -> Path:
    slug = repo.replace("/", "+")
    candidates = []
    if mirror_root is not None:
        candidates += [mirror_root / slug / "repo", mirror_root / slug / ".git", mirror_root / slug]
    candidates.append(cache / "clones" / slug)
    for candidate in candidates:
        if (candidate / "HEAD").exists() or (candidate / ".git").exists():
            return candidate
    target = cache / "clones" / slug
    subprocess.run(["git", "clone", "--bare", "--filter=blob:none", f"https://github.com/{repo}.git", str(target)],
                   check=True)
    return target


def _add_command_files(dest: Path, where: list[str], commit: str, folder: str | None) -> None:
    """The shell scripts, READMEs and Makefiles of the corpus: the linter reads how the project
    launches each script from them (a script run only as ``python x.py`` has one process)."""
    listing = _present_files(where, commit, folder)
    paths = [p for p in listing if p.endswith(_COMMAND_FILES) or p.rsplit("/", 1)[-1] in ("Makefile", "makefile")]
    if paths:
        archive = subprocess.run(["git", *where, "archive", "--format=tar", commit, "--", *paths],
                                 capture_output=True).stdout
        if archive:
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(dest, filter="data")
    (dest / ".commands").touch()


def _present_files(where: list[str], commit: str, folder: str | None = None) -> list[str]:
    """The files of ``commit`` (under ``folder``) whose blobs the snapshot holds.

    A snapshot may list a large file whose blob it left out; ``git archive`` fails on it.
    """
    listing = subprocess.run(["git", *where, "ls-tree", "-r", commit, *([folder] if folder else [])],
                             check=True, capture_output=True, text=True).stdout.splitlines()
    entries = [(line.split(None, 3)[2], line.split("\t", 1)[1]) for line in listing if "\t" in line]
    checked = subprocess.run(["git", *where, "cat-file", "--batch-check"], check=True, capture_output=True,
                             text=True, input="".join(f"{oid}\n" for oid, _ in entries)).stdout.splitlines()
    return [path for (_, path), answer in zip(entries, checked) if not answer.endswith(" missing")]


def _git_corpus(name: str, root: Path, mirror_root: Path | None) -> Path:
    repo, commit, folder = GIT_CORPORA[name]
    dest = root / f"{name}-{commit[:12]}"
    if (dest / ".complete").exists() and not (dest / ".commands").exists():
        try:  # a corpus unpacked before command files were read: add them where its git dir is at hand
            git_dir = _git_dir(repo, mirror_root, root)
            where = ["-C", str(git_dir)] if (git_dir / ".git").exists() else ["--git-dir", str(git_dir)]
            _add_command_files(dest, where, commit, folder)
        except (subprocess.CalledProcessError, OSError, tarfile.TarError) as exc:
            print(f"   ({name}: command files not added: {exc})", file=sys.stderr)
    if not (dest / ".complete").exists():
        git_dir = _git_dir(repo, mirror_root, root)
        where = ["-C", str(git_dir)] if (git_dir / ".git").exists() else ["--git-dir", str(git_dir)]
        paths = [p for p in _present_files(where, commit, folder) if p.endswith(_SOURCES)]
        archive = subprocess.run(["git", *where, "archive", "--format=tar", commit, "--", *paths],
                                 check=True, capture_output=True).stdout
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(dest, filter="data")
        _add_command_files(dest, where, commit, folder)
        (dest / ".complete").touch()
    return dest


def corpus_root(name: str, cache: Path, mirror_root: Path | None) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    return wheel_corpus(cache) if name == "wheels" else _git_corpus(name, cache, mirror_root)


# -- findings and the triage table ----------------------------------------------------------------
@dataclass(frozen=True)
class Key:
    """A finding's place in a table. Two findings of one rule on one line (two names in one
    call) are two rows, told apart by their order: ``nth`` counts earlier rows with the same
    path, line and code, in table order or in the linter's (column) order."""
    path: str
    line: int
    code: str
    nth: int = 0


def _numbered(places: list[tuple[str, int, str]]) -> list[Key]:
    seen: collections.Counter = collections.Counter()
    keys = []
    for place in places:
        keys.append(Key(*place, seen[place]))
        seen[place] += 1
    return keys


def lint(root: Path) -> list[dict]:
    cmd = [sys.executable, "-m", "accel_lint", "--no-cache", "--exit-zero", "--output-format", "json-lines", "."]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stderr)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def read_table(name: str) -> dict[Key, tuple[str, str]]:
    return read_table_at(TABLES / f"{name}.tsv")


def read_table_at(path: Path) -> dict[Key, tuple[str, str]]:
    table: dict[Key, tuple[str, str]] = {}
    if not path.exists():
        return table
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    keys = _numbered([(row["path"], int(row["line"]), row["code"]) for row in rows])
    for key, row in zip(keys, rows):
        table[key] = (row["verdict"], row["reason"])
    return table


def append_untriaged(name: str, findings: list[dict]) -> None:
    path = TABLES / f"{name}.tsv"
    TABLES.mkdir(exist_ok=True)
    new_file = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        if new_file:
            writer.writerow(["path", "line", "code", "verdict", "reason"])
        for f in findings:
            writer.writerow([f["path"], f["line"], f["code"], "untriaged", f["message"][:160]])


def accelerator_files(root: Path) -> int:
    count = 0
    for path in list(root.rglob("*.py")) + list(root.rglob("*.ipynb")):
        try:
            if ACCELERATOR_CONSTRUCTION.search(path.read_bytes()):
                count += 1
        except OSError:
            pass
    return count


def _precision(c: collections.Counter) -> float | None:
    denominator = c["TP"] + c["FP"] + c["untriaged"]
    return round(c["TP"] / denominator, 3) if denominator else None


def _recall(found_tp: int, missed: int) -> float | None:
    return round(found_tp / (found_tp + missed), 3) if found_tp + missed else None


def compare(name: str, findings: list[dict], table: dict[Key, tuple[str, str]]) -> dict:
    """Findings against the table. A finding on a ``missed`` row is a real bug now found (TP);
    ``missed`` rows still not found, and ``TP`` rows no longer found, count against recall.
    AL403 (info) is counted apart."""
    found = dict(zip(_numbered([(f["path"], f["line"], f["code"]) for f in findings]), findings))
    per_rule: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    new = []
    for key, finding in sorted(found.items(), key=lambda kv: (kv[0].path, kv[0].line, kv[0].code)):
        verdict = table.get(key, ("untriaged", ""))[0]
        if verdict == MISSED:
            verdict = "TP"
        elif verdict not in VERDICTS:
            verdict = "untriaged"
            new.append(finding)
        per_rule[key.code][verdict] += 1
    for key, (verdict, _) in table.items():
        # a real bug no longer reported counts against recall, whether it was read as missed or
        # reported once (TP) and lost since
        if verdict in (MISSED, "TP") and key not in found:
            per_rule[key.code][MISSED] += 1
    still_missed = sorted((k for k, v in table.items() if v[0] in (MISSED, "TP") and k not in found),
                          key=lambda k: (k.path, k.line, k.code))
    gone = sorted((k for k, v in table.items() if k not in found and v[0] != MISSED),
                  key=lambda k: (k.path, k.line, k.code))
    total, without_al403 = collections.Counter(), collections.Counter()
    for code, counts in per_rule.items():
        total.update(counts)
        if code != "AL403":
            without_al403.update(counts)
    return {
        "findings": len(found),
        "counts": dict(total),
        "precision": _precision(total),
        "precision_without_al403": _precision(without_al403),
        "recall_without_al403": _recall(without_al403["TP"], without_al403[MISSED]),
        "al403": dict(per_rule.get("AL403", {})),
        "per_rule": {code: {**dict(c), "precision": _precision(c)} for code, c in sorted(per_rule.items())},
        "new": [f"{f['path']}:{f['line']}: {f['code']} {f['message'][:120]}" for f in new],
        "gone": [f"{k.path}:{k.line}: {k.code} ({table[k][0]})" for k in gone],
        # the real bugs read in the code that are still not reported, with the reader's reason
        "still_missed": [f"{k.path}:{k.line}: {k.code} {table[k][1][:200]}" for k in still_missed],
    }


def first_contact(name: str) -> dict | None:
    """The figures of a corpus's first lint, from its frozen triage (no re-lint: that lint is
    the one the table records)."""
    path = FIRST_CONTACT / f"{name}.tsv"
    if not path.exists():
        return None
    table = read_table_at(path)
    findings = [{"path": k.path, "line": k.line, "code": k.code, "message": ""}
                for k, (verdict, _) in table.items() if verdict != MISSED]
    result = compare(name, findings, table)
    return {k: result[k] for k in ("findings", "counts", "precision_without_al403", "recall_without_al403", "al403")}


def first_contact_totals(names: list[str]) -> dict:
    """Precision and recall at first contact over every corpus that has a frozen first triage."""
    total = collections.Counter()
    al403 = collections.Counter()
    for name in names:
        path = FIRST_CONTACT / f"{name}.tsv"
        if not path.exists():
            continue
        for key, (verdict, _) in read_table_at(path).items():
            (al403 if key.code == "AL403" else total)[verdict] += 1
    return {"corpora": sorted(n for n in names if (FIRST_CONTACT / f"{n}.tsv").exists()), "counts": dict(total),
            "precision_without_al403": _precision(total), "recall_without_al403": _recall(total["TP"], total[MISSED]),
            "al403": dict(al403)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", action="append", choices=CORPORA, help="default: all")
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "ACCEL_LINT_ECOSYSTEM_CACHE", Path.home() / ".cache" / "accel-lint-ecosystem")))
    parser.add_argument("--mirror-root", type=Path, default=Path(os.environ.get("ACCEL_LINT_MIRRORS", "/work/.mirror")))
    parser.add_argument("--json", type=Path, default=HERE / "results" / "ecosystem.json")
    parser.add_argument("--write-new", action="store_true", help="append untriaged findings to the tables")
    args = parser.parse_args()
    mirror_root = args.mirror_root if args.mirror_root.exists() else None
    results = {}
    for name in args.corpus or CORPORA:
        root = corpus_root(name, args.cache, mirror_root)
        findings = lint(root)
        table = read_table(name)
        result = compare(name, findings, table)
        result["accelerator_files"] = accelerator_files(root)
        result["first_contact"] = first_contact(name)
        fp = result["counts"].get("FP", 0) + result["counts"].get("untriaged", 0)
        result["fp_per_20_accelerator_files"] = round(20 * fp / result["accelerator_files"], 2) if result["accelerator_files"] else None
        results[name] = result
        if args.write_new:
            keys = _numbered([(f["path"], f["line"], f["code"]) for f in findings])
            append_untriaged(name, [f for key, f in zip(keys, findings) if key not in table])
        print(f"== {name}: {result['findings']} findings, {result['accelerator_files']} files construct an accelerator")
        print(f"   verdicts {result['counts']}  precision {result['precision']} "
              f"(without AL403 {result['precision_without_al403']}, recall {result['recall_without_al403']})  "
              f"FP+untriaged per 20 accelerator files {result['fp_per_20_accelerator_files']}")
        if result["first_contact"] is not None:
            fc = result["first_contact"]
            print(f"   first contact: {fc['counts']}  precision without AL403 {fc['precision_without_al403']}  "
                  f"recall {fc['recall_without_al403']}")
        for code, counts in result["per_rule"].items():
            print(f"   {code}: " + ", ".join(f"{k}={v}" for k, v in counts.items()))
        for line in result["new"]:
            print(f"   new: {line}")
        for line in result["gone"]:
            print(f"   gone: {line}")
    totals = first_contact_totals(list(args.corpus or CORPORA))
    print(f"== first contact over {len(totals['corpora'])} corpora: {totals['counts']}  precision without AL403 "
          f"{totals['precision_without_al403']}  recall {totals['recall_without_al403']}  AL403 {totals['al403']}")
    results["first_contact_totals"] = totals
    args.json.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(args.json.read_text()) if args.json.exists() else {}
    previous.update(results)
    args.json.write_text(json.dumps(previous, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
