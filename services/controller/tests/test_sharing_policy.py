"""Anti-thrashing policies (core/sharing/policy.py): the seed's constants, and the
GPUGroup's from its spec.antiThrashing fields."""

from __future__ import annotations

import pytest

from flexinfer_common.api.gpugroup import AntiThrashing, ScalingPolicy
from flexinfer_controller.core.sharing.policy import SwapPolicy, gpugroup_policy, shared_policy


def test_shared_policy_has_the_seeds_v1alpha2_constants() -> None:
    policy = shared_policy()
    assert (policy.demand_window_s, policy.queue_threshold, policy.swap_cooldown_s) == (
        120.0,
        1,
        300.0,
    )
    assert policy.preemption_cooldown_s == 0.0
    assert policy.hysteresis_s == 0.0


def test_gpugroup_policy_defaults_are_the_seeds_v1alpha1_constants() -> None:
    policy = gpugroup_policy()
    assert policy.swap_cooldown_s == 30.0
    assert policy.preemption_cooldown_s == 60.0
    assert policy.queue_threshold == 3
    assert policy.hysteresis_s == 10.0


def test_gpugroup_policy_reads_the_resources_fields() -> None:
    anti = AntiThrashing.model_validate(
        {
            "minimumRunDurationSeconds": 5,
            "cooldownAfterPreemptionSeconds": 7,
            "requestQueueThreshold": 2,
            "hysteresisWindowSeconds": 0,
        }
    )
    policy = gpugroup_policy(anti, starvation_s=90.0)
    assert (policy.swap_cooldown_s, policy.preemption_cooldown_s) == (5.0, 7.0)
    assert (policy.queue_threshold, policy.hysteresis_s, policy.starvation_s) == (2, 0.0, 90.0)


def test_disabled_anti_thrashing_turns_every_gate_off() -> None:
    policy = gpugroup_policy(AntiThrashing(enabled=False))
    assert policy.queue_threshold == 1
    assert policy.swap_cooldown_s == policy.preemption_cooldown_s == policy.hysteresis_s == 0.0


def test_a_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="queue_threshold"):
        SwapPolicy("x", 0, 1.0, 0.0, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="negative"):
        SwapPolicy("x", 1, 1.0, 0.0, -1.0, 0.0, 0.0)


def test_the_drain_grace_is_30s_shared_and_a_gpugroups_scaling_policy() -> None:
    assert shared_policy().drain_timeout_s == 30.0
    assert shared_policy(drain_timeout_s=5.0).drain_timeout_s == 5.0
    assert gpugroup_policy().drain_timeout_s == 60.0  # drainTimeoutSeconds' default
    graceful = ScalingPolicy(drain_timeout_seconds=120)
    assert gpugroup_policy(scaling=graceful).drain_timeout_s == 120.0
    immediate = ScalingPolicy(preemption_policy="Immediate", drain_timeout_seconds=120)
    assert gpugroup_policy(scaling=immediate).drain_timeout_s == 0.0
    off = gpugroup_policy(AntiThrashing(enabled=False), scaling=graceful)
    assert off.drain_timeout_s == 120.0  # draining is no anti-thrashing gate
    with pytest.raises(ValueError, match="negative"):
        shared_policy(drain_timeout_s=-1.0)
