"""benchmarks/surealm/surealm_retrieves.py --fold-gpu: the GPU run becomes the headline under the
issue's names and the CPU run is kept beside it with _cpu names."""

from __future__ import annotations

from benchmarks.surealm.surealm_retrieves import fold_gpu


def _cpu() -> dict:
    return {
        "command": "cpu cmd",
        "machine": "cpu box",
        "date": "2026-11-27",
        "metrics": {
            "surealm_ppl_reduction": -0.001,
            "surealm_step0_ppl_ratio": 1.0,
            "test_token_ppl_retrieved": 106.2,
        },
        "targets": {
            "surealm_ppl_reduction": ">= 0.07",
            "surealm_step0_ppl_ratio": "between 0.9999 and 1.0001",
        },
        "curves": {"retrieved": [[100, 120.0]]},
    }


def _gpu() -> dict:
    return {
        "command": "gpu cmd",
        "machine": "gpu box",
        "date": "2026-11-28",
        "metrics": {"gpu_surealm_ppl_reduction": -0.034, "gpu_test_token_ppl_retrieved": 80.86},
        "targets": {"gpu_surealm_ppl_reduction": ">= 0.07"},
        "curves": {"retrieved": [[500, 106.2]]},
        "gates_end": [0.03],
    }


def test_fold_gpu_names_and_keeps_both_runs() -> None:
    metrics, targets, extra = fold_gpu(_cpu(), _gpu())
    assert metrics == {
        "surealm_ppl_reduction": -0.034,
        "test_token_ppl_retrieved": 80.86,
        "surealm_ppl_reduction_cpu": -0.001,
        "surealm_step0_ppl_ratio_cpu": 1.0,
        "test_token_ppl_retrieved_cpu": 106.2,
    }
    assert targets == {
        "surealm_ppl_reduction": ">= 0.07",
        "surealm_ppl_reduction_cpu": "reported",
        "surealm_step0_ppl_ratio_cpu": "between 0.9999 and 1.0001",
    }
    assert extra["curves"] == {"retrieved": [[500, 106.2]]} and extra["gates_end"] == [0.03]
    assert extra["gpu_run"] == {"command": "gpu cmd", "machine": "gpu box", "date": "2026-11-28"}
    assert extra["cpu_run"] == _cpu()


def test_folding_a_folded_file_again_uses_its_cpu_run() -> None:
    metrics, targets, extra = fold_gpu(_cpu(), _gpu())
    folded = {"metrics": metrics, "targets": targets, **extra}
    assert fold_gpu(folded, _gpu()) == (metrics, targets, extra)
