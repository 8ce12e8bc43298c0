"""The MuJoCo peer of scripts/bench_montecarlo.py: `mujoco.rollout` (native, multi-threaded)
of an arm comparable to the spec's 3-DoF series-parallel arm
(../shared/specs/series_parallel_3dof.md), open loop.

The arm: body 1 turns about the vertical (phi; 30 kg), link 1 about a horizontal axis (theta;
60 kg, 2 m), link 2 about a parallel axis at link 1's end (60 kg, 2 m to the tool), with the
spec's masses, centres of mass and principal inertias. The triangle and cylinder that drive
link 2 in the real arm are replaced by a motor on the hinge: MuJoCo would close the loop with a
soft equality constraint, which is not the comparison wanted here. The controls are a
precomputed torque sequence (MuJoCo has no model-based controller in its loop); each rollout
starts from its own perturbed initial state. RK4 at a fixed step, checked against a 10x finer
step. mujoco is not a project dependency: import this module where it is installed.

    python scripts/mujoco_rollout_peer.py
"""

from __future__ import annotations

import os
import time

import numpy as np

MJCF = """
<mujoco model="series_parallel_3dof_open">
  <option gravity="0 0 -9.81" integrator="RK4" timestep="0.001"/>
  <worldbody>
    <body name="base" pos="0 0 0">
      <joint name="phi" type="hinge" axis="0 0 1"/>
      <inertial pos="0 0 0.103" mass="30" diaginertia="0.804 0.831 1.18"/>
      <body name="link1" pos="0 -0.075 0.206" euler="90 0 0">
        <joint name="theta" type="hinge" axis="0 0 1"/>
        <inertial pos="0.959 0.001 -0.077" mass="60" diaginertia="0.311 22.7 22.8"/>
        <body name="link2" pos="2 0 0">
          <joint name="zeta" type="hinge" axis="0 0 1"/>
          <inertial pos="1.041 0.001 -0.077" mass="60" diaginertia="0.311 22.7 22.8"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor joint="phi"/>
    <motor joint="theta"/>
    <motor joint="zeta"/>
  </actuator>
</mujoco>
"""

Q0 = np.array([0.0, 0.35, -2.0])  # rad: a pose like the Section IV scenario's


def _model(timestep: float):
    import mujoco

    m = mujoco.MjModel.from_xml_string(MJCF)
    m.opt.timestep = timestep
    return m


def _inputs(m, batch: int, nstep: int, seed: int = 0):
    """Initial states (perturbed poses) and a torque sequence: the static torques at Q0 plus
    slow sinusoids, so the arm moves through its workspace."""
    import mujoco

    d = mujoco.MjData(m)
    d.qpos[:] = Q0
    mujoco.mj_forward(m, d)
    hold = d.qfrc_bias.copy()  # gravity at Q0 (at rest)
    t = np.arange(nstep) * m.opt.timestep
    ctrl = hold[None, :] + np.stack([50 * np.sin(2 * np.pi * t / p) for p in (10, 8, 5)], 1)
    rng = np.random.default_rng(seed)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    size = mujoco.mj_stateSize(m, spec)
    states = np.zeros((batch, size))
    for i in range(batch):
        d.qpos[:] = Q0 + 0.05 * rng.standard_normal(3)
        d.qvel[:] = 0
        d.time = 0
        mujoco.mj_getState(m, d, states[i], spec)
    return states, np.broadcast_to(ctrl[None], (batch, nstep, 3)).copy()


def step_error(t_sim: float, timestep: float) -> float:
    """Max |q| difference at ``t_sim`` between ``timestep`` and ``timestep / 10``."""
    import mujoco
    from mujoco import rollout

    finals = []
    for h in (timestep, timestep / 10):
        m = _model(h)
        n = int(round(t_sim / h))
        s0, ctrl = _inputs(m, 1, n)
        state, _ = rollout.rollout(m, mujoco.MjData(m), s0, ctrl)
        finals.append(state[0, -1, 1:4])  # FULLPHYSICS: time, qpos, qvel, ...
    return float(np.abs(finals[0] - finals[1]).max())


def rollout_rate(
    batch: int, t_sim: float = 20.0, timestep: float = 1e-3, nthread: int | None = None
) -> dict:
    """Simulated seconds per wall second of ``batch`` rollouts of ``t_sim`` s (second call timed,
    the thread pool reused)."""
    import mujoco
    from mujoco import rollout

    nthread = nthread or os.cpu_count() or 1
    m = _model(timestep)
    n = int(round(t_sim / timestep))
    s0, ctrl = _inputs(m, batch, n)
    datas = [mujoco.MjData(m) for _ in range(nthread)]
    kw = {"persistent_pool": nthread > 1}
    rollout.rollout(m, datas, s0[:1], ctrl[:1], **kw)  # warm-up
    t0 = time.perf_counter()
    rollout.rollout(m, datas, s0, ctrl, **kw)
    wall = time.perf_counter() - t0
    return {
        "batch": batch,
        "timestep": timestep,
        "integrator": "RK4",
        "nthread": nthread,
        "wall_s": wall,
        "sim_s_per_wall_s": batch * t_sim / wall,
        "step_error_rad": step_error(min(t_sim, 5.0), timestep),
    }


if __name__ == "__main__":
    for b, t in ((1, 20.0), (100, 20.0), (10_000, 2.0)):
        r = rollout_rate(b, t)
        print(f"batch {b:>6}, {t:g} s: {r['sim_s_per_wall_s']:.1f} sim s/s ({r['wall_s']:.2f} s), "
              f"step error {r['step_error_rad']:.1e} rad")  # fmt: skip
