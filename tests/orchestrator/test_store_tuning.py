"""What the tuner keeps (``store.profiles``, ``store.tune_reports``, ``store.tune_cache``,
``store.study_journal``) on a real Redis."""

from __future__ import annotations

import pytest

from orchestrator.store import JobStore, Keys, StudyJournal
from orchestrator.tuner.profile import expected, prediction_errors, record_live, record_outcome

PROFILE = {
    "goal": "max samples/s",
    "curves": {"fp32": [{"gpus": 1, "micro_batch": 8, "samples_per_s": 100.0}]},
    "chosen": {"samples_per_s": 120.0, "latency_ms": 50.0, "percentile": 95},
}


def test_the_tuner_keys_are_named_under_the_namespace() -> None:
    k = Keys("ns")
    assert k.profile("job-1") == "ns:profile:job-1"
    assert k.tune_report("job-1") == "ns:tune:job-1"
    assert k.tune_cache_index == "ns:tune-cache"
    assert k.tune_cache_entry("ab12") == "ns:tune-cache:ab12"
    assert k.optuna_journal == "ns:optuna"
    assert k.scaling("job-1") == "ns:scaling:job-1"
    assert k.pool_view == "ns:pool"
    assert k.scheduler_lease == "ns:scheduler:lease"
    assert k.teams == "ns:teams"


@pytest.mark.parametrize("attr", ["profiles", "tune_reports"])
def test_job_documents_round_trip(store: JobStore, attr: str) -> None:
    docs = getattr(store, attr)
    assert docs.load("job-1") is None
    docs.save("job-1", PROFILE)
    assert docs.load("job-1") == PROFILE
    docs.save("job-1", {"replaced": True})
    assert docs.load("job-1") == {"replaced": True}
    assert docs.load("job-2") is None
    assert store.delete_namespace() == 1
    assert docs.load("job-1") is None


def test_profiles_and_reports_keep_their_key_names(store: JobStore) -> None:
    """Data written before the stores existed reads back: the key names did not change."""
    store.profiles.save("j", {"p": 1})
    store.tune_reports.save("j", {"r": 2})
    assert store.client.get(f"{store.namespace}:profile:j") == '{"p": 1}'
    assert store.client.get(f"{store.namespace}:tune:j") == '{"r": 2}'


def test_the_prediction_error_is_kept_in_the_profile(store: JobStore) -> None:
    assert record_outcome(store.profiles, "job-1", {"samples_per_s": 100.0}) is None  # no profile
    store.profiles.save("job-1", PROFILE)
    metrics = {"samples_per_s": 100.0, "p95_ms": 40.0}
    errors = record_outcome(store.profiles, "job-1", metrics)
    assert errors == pytest.approx({"samples_per_s": 0.2, "latency_ms": 0.25})
    stored = store.profiles.load("job-1")
    assert stored is not None
    assert stored["outcome"] == {"measured": metrics, "error": errors}
    assert prediction_errors({"chosen": {}}, metrics) is None  # nothing was predicted


def test_a_live_correction_is_what_the_profile_expects_from_then_on(store: JobStore) -> None:
    chosen = {
        "config": {"micro_batch": 8, "gpus": 2},
        "samples_per_s": 33_599.0,  # the fitted model's
        "latency_ms": 4.0,
        "measured_samples_per_s": 20_000.0,  # the tuning trial of exactly this config
        "measured_latency_ms": 5.0,
    }
    assert record_live(store.profiles, "job-1", 2, 5_948.0, 9.0, 1.0) is None  # no profile
    store.profiles.save("job-1", {"chosen": chosen})
    # the trial comes before the model; another GPU count has no expectation
    assert expected(store.profiles.load("job-1"), 2) == (20_000.0, 5.0)
    assert expected(store.profiles.load("job-1"), 1) == (None, None)
    assert expected({"chosen": {"config": {"gpus": 1}, "samples_per_s": 10.0}}, 1) == (10.0, None)
    kept = record_live(store.profiles, "job-1", 2, 5_948.0, 9.0, 123.0)
    assert kept == {"gpus": 2, "samples_per_s": 5_948.0, "latency_ms": 9.0, "at": 123.0}
    profile = store.profiles.load("job-1")
    assert expected(profile, 2) == (5_948.0, 9.0)
    assert profile is not None and profile["chosen"]["samples_per_s"] == 33_599.0  # kept beside


def test_tune_cache_entries_and_their_index(store: JobStore) -> None:
    cache = store.tune_cache
    assert cache.get("fp1") is None
    assert cache.fingerprints("mlp|cpu|cpu") == []
    cache.put("fp1", {"trials": [1]}, "mlp|cpu|cpu")
    cache.put("fp2", {"trials": [2]}, "mlp|cpu|cpu")
    cache.put("fp3", {"trials": [3]}, "mlp|cuda|H100")
    assert cache.get("fp1") == {"trials": [1]}
    assert sorted(cache.fingerprints("mlp|cpu|cpu")) == ["fp1", "fp2"]
    assert cache.fingerprints("mlp|cuda|H100") == ["fp3"]
    cache.put("fp1", {"trials": [1, 4]}, "mlp|cpu|cpu")  # replaced, indexed once
    assert cache.get("fp1") == {"trials": [1, 4]}
    assert sorted(cache.fingerprints("mlp|cpu|cpu")) == ["fp1", "fp2"]
    assert store.client.hget(f"{store.namespace}:tune-cache", "fp3") == "mlp|cuda|H100"
    assert store.client.exists(f"{store.namespace}:tune-cache:fp3")
    assert store.delete_namespace() == 4  # three entries and the index
    assert cache.get("fp1") is None and cache.fingerprints("mlp|cpu|cpu") == []


def test_the_study_journal_is_handed_out_under_the_namespace(
    store: JobStore, redis_url: str
) -> None:
    journal = store.study_journal(redis_url)
    assert journal == StudyJournal(redis_url, f"{store.namespace}:optuna")
    # Optuna writes its journal under that prefix, so the namespace holds (and deletes) it.
    from orchestrator.tuner.study import open_study

    study = open_study(journal, "tune-j", "maximize")
    study.add_trial(_trial())
    keys = set(store.client.scan_iter(match=store.keys.pattern))
    assert keys and all(k.startswith(f"{journal.prefix}:") for k in keys)
    assert open_study(journal, "tune-j", "maximize").trials[0].value == 1.0  # read back
    store.delete_namespace()
    assert list(store.client.scan_iter(match=store.keys.pattern)) == []


def _trial() -> object:
    import optuna

    return optuna.trial.create_trial(
        params={"x": 1}, distributions={"x": optuna.distributions.IntDistribution(1, 2)}, value=1.0
    )
