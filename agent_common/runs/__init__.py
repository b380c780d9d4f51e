"""A run's lifecycle, in one place: its directory, its checkpoints, a resume, a start from weights.

Modules (each imports only the ones above it)
    files            the run's file names, atomic writes, reading a checkpoint's files, the lifecycle's errors
    commands         the commands printed for the user to run next (train, convert), "resume:" / "extend:" lines
    manifest         a checkpoint's SHA-256 manifest ``COMPLETE`` (its commit marker) and its verification
    upstream_layout  another program's checkpoint layout (upstream FlashSAC), recognised and never touched
    checkpoints      ``<run>/checkpoints/step<N>/``: write atomically, scan, recover, prune, set aside, select
    rundir           the run directory: derived ``save_path``, the check before any work, an incomplete run started
                     over in place
    resume           a resume: the checkpoint and config it continues from, the schedule it keeps
    start_from       ``agent_init_path``: a new run from a checkpoint's (or a converted folder's) weights
    state            a checkpoint's files for a driver: ``save_state`` (agent, config, loop state, replay rows,
                     one directory per data-parallel replica) and ``load_state``

Checkpoint layout: ``<save_path>/checkpoints/step<env_step>/{agent/, config.yaml, loop_state.pkl,
replay_buffer.pkl, ranks/rank<r>/..., COMPLETE}``; ``agent_load_path`` accepts the step directory or the run
directory (its newest checkpoint that verifies; damaged ones are moved to ``checkpoints/damaged/``;
``checkpoints/latest`` only names it for people).
"""
