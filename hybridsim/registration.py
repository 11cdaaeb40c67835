"""gymnasium ids for hybridsim's environments, as ale-py registers its own (ale_py/registration.py):

    hybridsim/<Game>-v5             frameskip 4, sticky 0.25   (ale-py: ALE/<Game>-v5)
    hybridsim/<Game>NoFrameskip-v5  frameskip 1, sticky 0.25
    hybridsim/<Game>-v0, -v4        frameskip uniform in [2, 5), sticky 0.25 / 0
    hybridsim/<Game>NoFrameskip-v0, -v4   frameskip 1, sticky 0.25 / 0
all with 108,000 frames per episode at most. gymnasium.make gives hybridsim.env.AtariEnv;
gymnasium.make_vec gives hybridsim.AtariVectorEnv for <Game>-v5 and, as ale-py, vectorizes
the single environment for the other ids. Only gymnasium is imported here; the emulator
and ale-py load when an environment is made.
"""
from __future__ import annotations

NAMESPACE = "hybridsim"
# No single-player game settings in ALE (ale-py skips them too).
MULTIPLAYER_ONLY = {"combat", "joust", "maze_craze", "warlords"}


def rom_id_to_name(rom: str) -> str:
    """'space_invaders' -> 'SpaceInvaders' (ale-py's rule)."""
    return rom.title().replace("_", "")


def register_envs() -> None:
    import warnings

    import gymnasium

    # ale-py's -v4 ids have no namespace and no -v5 beside them, so gymnasium.make does not
    # call them out of date; here <Game>-v5 shares hybridsim/ with them (PongNoFrameskip-v4,
    # the DQN papers' id, warned). The -v0 ids warn as ale-py's do (of -v4 there).
    warnings.filterwarnings("ignore", message=rf".*The environment {NAMESPACE}/\w+-v4 is out of date",
                            category=DeprecationWarning)

    from hybridsim import games_table

    def add(env_id, game, vector=False, **kwargs):
        full = f"{NAMESPACE}/{env_id}"
        if full in gymnasium.registry:
            return
        # the batched engine only for <Game>-v5, as ale-py: make_vec of the others vectorizes
        # the single environment (their frameskip may be random, their frames raw)
        gymnasium.register(id=full, entry_point="hybridsim.env:AtariEnv",
                           vector_entry_point="hybridsim.env:make_vector_env" if vector else None,
                           kwargs=dict(game=game, full_action_space=False,
                                       max_num_frames_per_episode=108_000, **kwargs))

    for rom in sorted(g["name"] for g in games_table.games()):
        if rom in MULTIPLAYER_ONLY:
            continue
        name = rom_id_to_name(rom)
        add(f"{name}-v5", rom, vector=True, repeat_action_probability=0.25, frameskip=4)
        add(f"{name}NoFrameskip-v5", rom, repeat_action_probability=0.25, frameskip=1)
        for version, sticky in (("v0", 0.25), ("v4", 0.0)):
            add(f"{name}-{version}", rom, repeat_action_probability=sticky, frameskip=(2, 5))
            add(f"{name}NoFrameskip-{version}", rom, repeat_action_probability=sticky, frameskip=1)
