"""spdl-go's audio pipeline against PyTorch DataLoader and SPDL, in one run.

Same files (benchmarks/datasets.py audio_like: 3-10 s stereo clips at 44.1
or 48 kHz, ~70% FLAC, ~30% 16-bit WAV), same work for every configuration:
decode the first 4 s of each clip to float32, mix to mono, resample to
16 kHz, crop or zero-pad to exactly 64,000 samples, and batch 16 clips into
a float32 tensor (16, 1, 64000) plus int64 labels (16,), as torch tensors.
Every loader decodes only what the 4 s crop needs (about 4 s of audio).

Configurations:

* spdl-go: ops.decode_audio(sample_rate=16000, num_channels=1,
  num_samples=64000) (libswresample; decoding stops at 64,000 output
  samples), concurrency = cores -> aggregate(16) -> ops.collate ->
  torch.from_dlpack; "spdl-go auto" is the same with concurrency="auto";
  "spdl-go width 6" resamples with torchaudio's default filter length
  (decode_audio(lowpass_filter_width=6): 6 zero crossings a side, as the
  DataLoader's resample uses, against libswresample's 16, which the other
  spdl-go rows and SPDL use);
* torch DataLoader over a map-style Dataset, num_workers 0, 1, 2, 4:
  soundfile (libsndfile, ``pip install soundfile``) reads the first 4 s
  (+10 ms) as float32, the channels are averaged, and the result is
  resampled to 16 kHz with torchaudio.functional.resample if torchaudio is
  importable, else with a torch port of that same function (windowed-sinc,
  Hann window, lowpass_filter_width 6, rolloff 0.99: the kernel is built
  once per rate pair and applied with conv1d), then cropped/padded;
* SPDL 0.8 (``pip install spdl``): spdl.io.demux_audio(timestamp=(0, 4)) +
  decode_packets with get_audio_filter_desc(sample_rate=16000,
  num_channels=1, num_frames=64000) (FFmpeg aformat, aresample, atrim, apad),
  in spdl.pipeline.PipelineBuilder with concurrency = cores -> aggregate(16)
  -> spdl.io.convert_frames -> spdl.io.to_torch.

A configuration whose library cannot be imported is skipped, with the
reason printed and recorded in the JSON. Each run happens in a fresh
subprocess (benchmarks/harness.py): clips/s, CPU-seconds per 1,000 clips,
peak RSS/PSS of the process tree, memory added by the loader, and time to
the first batch; median of --repeat runs, interleaved.

    python benchmarks/bench_audio.py [--clips 400] [--repeat 3]
        [--json benchmarks/results/audio.json]
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import ItemsDataset, clips_main, measure_batches, torch_dataloader  # noqa: E402

CORES = os.cpu_count() or 1
BATCH = 16
RATE = 16000
SECONDS = 4
SAMPLES = RATE * SECONDS
DL_WORKERS = (0, 1, 2, 4)
OURS = ("spdl-go", "spdl-go auto", "spdl-go width 6")


# --------------------------------------------------------------------------
# Loaders: each yields (audio, labels) torch tensors
# --------------------------------------------------------------------------


def spdl_go_loader(items, param):
    """param: the decode concurrency ("auto" or a number), then
    optionally ":w<lowpass_filter_width>"."""
    from torch import from_dlpack

    from spdl_go import PipelineBuilder, ops

    concurrency, _, width = param.partition(":w")
    auto = concurrency == "auto"
    p = (
        PipelineBuilder()
        .add_source(items)
        .pipe(
            ops.decode_audio(
                sample_rate=RATE,
                num_channels=1,
                num_samples=SAMPLES,
                lowpass_filter_width=int(width) if width else None,
            ),
            concurrency="auto" if auto else int(concurrency),
            name="decode",
        )
        .aggregate(BATCH)
        .pipe(ops.collate(numbers="tensor"), name="collate")
        .add_sink(buffer_size=4)
        .build(num_threads=None if auto else int(concurrency) + 1)
    )
    try:
        for audio, labels in p:
            yield from_dlpack(audio), from_dlpack(labels)
    finally:
        p.close()


_KERNELS: dict = {}
_TORCHAUDIO: list = []  # [module or None], resolved on first use


def _resample(x, orig: int, new: int):
    """torchaudio.functional.resample(x, orig, new) (its defaults), or a
    port of it when torchaudio is absent. x: (channels, time) float32."""
    if not _TORCHAUDIO:
        try:
            import torchaudio.functional as F

            _TORCHAUDIO.append(F)
        except Exception:  # noqa: BLE001  (absent, or built for another torch)
            _TORCHAUDIO.append(None)
    if _TORCHAUDIO[0] is not None:
        return _TORCHAUDIO[0].resample(x, orig, new)
    import torch

    g = math.gcd(orig, new)
    o, n = orig // g, new // g
    if o == n:
        return x
    kernel, width = _KERNELS.get((o, n)) or _KERNELS.setdefault((o, n), _sinc_kernel(o, n))
    c, length = x.shape
    y = torch.nn.functional.pad(x.reshape(-1, 1, length), (width, width + o))
    y = torch.nn.functional.conv1d(y, kernel, stride=o)
    y = y.transpose(1, 2).reshape(c, -1)
    return y[:, : math.ceil(n * length / o)]


def _sinc_kernel(orig: int, new: int, lowpass_filter_width: int = 6, rolloff: float = 0.99):
    """torchaudio's _get_sinc_resample_kernel (sinc_interp_hann)."""
    import torch

    base = min(orig, new) * rolloff
    width = math.ceil(lowpass_filter_width * orig / base)
    idx = torch.arange(-width, width + orig, dtype=torch.float64)[None, None] / orig
    t = torch.arange(0, -new, -1, dtype=torch.float64)[:, None, None] / new + idx
    t *= base
    t = t.clamp_(-lowpass_filter_width, lowpass_filter_width)
    window = torch.cos(t * math.pi / lowpass_filter_width / 2) ** 2
    t *= math.pi
    scale = base / orig
    kernels = torch.where(t == 0, torch.tensor(1.0, dtype=t.dtype), t.sin() / t)
    kernels *= window * scale
    return kernels.to(torch.float32), width


class SoundFileDataset(ItemsDataset):
    """Map-style dataset: soundfile reads the first 4 s -> mono -> resample
    to 16 kHz -> crop/pad to 64,000 samples; returns ((1, 64000), label)."""

    def __getitem__(self, i):
        import soundfile as sf
        import torch

        path, label = self.items[i]
        with sf.SoundFile(path) as f:
            sr = f.samplerate
            x = f.read(frames=SECONDS * sr + sr // 100, dtype="float32", always_2d=True)  # (time, ch)
        x = torch.from_numpy(x).mean(dim=1, keepdim=True).T.contiguous()  # (1, time)
        y = _resample(x, sr, RATE)[:, :SAMPLES]
        if y.shape[1] < SAMPLES:
            y = torch.nn.functional.pad(y, (0, SAMPLES - y.shape[1]))
        return y, label


def dataloader_loader(items, workers):
    return torch_dataloader(SoundFileDataset(items), BATCH, workers)


def spdl_loader(items, threads):
    import spdl.io
    import torch
    from spdl.pipeline import PipelineBuilder

    def decode(item):
        path, label = item
        packets = spdl.io.demux_audio(path, timestamp=(0.0, float(SECONDS)))
        filter_desc = spdl.io.get_audio_filter_desc(
            sample_rate=RATE, num_channels=1, timestamp=packets.timestamp, num_frames=SAMPLES
        )
        return spdl.io.decode_packets(packets, filter_desc=filter_desc), label

    def collate(batch):
        buffer = spdl.io.convert_frames([f for f, _ in batch])
        labels = torch.tensor([label for _, label in batch], dtype=torch.int64)
        return spdl.io.to_torch(buffer), labels

    p = (
        PipelineBuilder()
        .add_source(items)
        .pipe(decode, concurrency=int(threads), name="decode")
        .aggregate(BATCH)
        .pipe(collate, name="collate")
        .add_sink(buffer_size=4)
        .build(num_threads=int(threads))
    )
    with p.auto_stop():
        yield from p.get_iterator(timeout=120)


LOADERS = {"spdl-go": spdl_go_loader, "dataloader": dataloader_loader, "spdl": spdl_loader}


def import_error(kind: str) -> str | None:
    """Why a configuration's library cannot be imported, or None."""
    mods = {
        "spdl-go": ("spdl_go",),
        "dataloader": ("torch", "soundfile"),
        "spdl": ("spdl", "spdl.io", "spdl.pipeline"),
    }[kind]
    for m in mods:
        try:
            __import__(m)
        except Exception as e:  # noqa: BLE001
            return f"import {m} failed: {type(e).__name__}: {e}"
    return None


def configs(threads: int) -> list[tuple[str, str, str]]:
    cs = [("spdl-go", "spdl-go", str(threads)), ("spdl-go auto", "spdl-go", "auto")]
    cs += [("spdl-go width 6", "spdl-go", f"{threads}:w6")]
    cs += [(f"DataLoader+soundfile w={w}", "dataloader", str(w)) for w in DL_WORKERS]
    cs += [("SPDL 0.8", "spdl", str(threads))]
    return cs


ANCHORS = {"DataLoader": "DataLoader", "SPDL 0.8": "SPDL"}  # group name -> row-name prefix


# --------------------------------------------------------------------------
# One measured run (executed in a fresh subprocess)
# --------------------------------------------------------------------------


def worker(kind: str, param: str, n_clips: int) -> dict:
    import torch
    from datasets import audio_like

    items = audio_like(n_clips)
    return measure_batches(LOADERS[kind](items, param), torch.float32, (1, SAMPLES), len(items))


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


def header(args) -> str:
    return f"{args.clips} audio clips (FLAC/WAV, 44.1/48 kHz stereo) -> 16 kHz mono, 4 s; batch {BATCH}"


def main() -> None:
    from datasets import audio_like

    clips_main(
        __file__,
        doc=__doc__,
        default_clips=400,
        json_default=HERE / "results" / "audio.json",
        dataset=audio_like,
        configs=configs,
        import_error=import_error,
        worker=worker,
        header=header,
        title="audio: decode 4 s + mono + resample 16 kHz + batch 16",
        batch=BATCH,
        ours=OURS,
        anchors=ANCHORS,
    )


if __name__ == "__main__":
    main()
