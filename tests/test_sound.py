"""ALE's sound observation (sound_obs, getAudio): hybridsim side by side with ale-py, per act.

The samples come from cuda/tia_sound.h (the TIA's two channels) fed by the TIA's audio
register writes; ale-py 0.12.1 is the reference: every act's 512 samples must be equal,
through sticky actions, ALE-level frame skip, reset_game, game over and cloneState /
restoreState (which leave ALE's sound as it was: its SoundRaw is never initialized).
"""
import numpy as np
import pytest

ale_py = pytest.importorskip("ale_py")

from hybridsim.ale import ALEInterface  # noqa: E402
from hybridsim.roms import rom_path  # noqa: E402


def _pair(game, frame_skip=1, sticky=0.25, sound=True, seed=11):
    sides = []
    for cls in (ale_py.ALEInterface, ALEInterface):
        a = cls()
        a.setLoggerMode(ale_py.LoggerMode.Error)
        a.setBool("sound_obs", sound)
        a.setInt("random_seed", seed)
        a.setInt("frame_skip", frame_skip)
        a.setFloat("repeat_action_probability", sticky)
        a.loadROM(str(rom_path(game)))
        sides.append(a)
    return sides


def _play_side_by_side(game, acts, frame_skip=1, sticky=0.25):
    """Random actions on both; returns the number of acts whose samples were not silent.
    A state is cloned a third of the way in and restored half way, and reset_game follows
    a game over (and every 250 acts)."""
    ref, ours = _pair(game, frame_skip, sticky)
    assert np.array_equal(ref.getAudio(), ours.getAudio()), "after loadROM"
    actions = ref.getMinimalActionSet()
    rng = np.random.default_rng(3)
    heard, saved = 0, None
    for t in range(acts):
        action = actions[rng.integers(len(actions))]
        assert ref.act(action) == ours.act(action)
        expected, got = ref.getAudio(), ours.getAudio()
        if not np.array_equal(expected, got):
            at = np.flatnonzero(expected != got)
            pytest.fail(f"{game}: act {t}: {at.size} samples differ, first at {at[0]}: "
                        f"ale-py {expected[at[:6]].tolist()}, hybridsim {got[at[:6]].tolist()}")
        heard += bool((got != 128).any())
        if t == acts // 3:
            saved = ref.cloneState(), ours.cloneState()
        if t == acts // 2:
            ref.restoreState(saved[0])
            ours.restoreState(saved[1])
        if ref.game_over() or t % 250 == 249:
            assert ours.game_over() == ref.game_over()
            ref.reset_game()
            ours.reset_game()
            assert np.array_equal(ref.getAudio(), ours.getAudio()), f"{game}: after reset_game"
    return heard


@pytest.mark.parametrize("game", [
    "space_invaders",  # both channels, many volumes
    "ms_pacman",
    "seaquest",
    "pitfall2",        # DPC music: the cartridge feeds AUDV
    "berzerk",         # its mode selection calls act() inside reset_game: samples before the first act
    "video_pinball",
])
def test_every_act_sounds_as_ale_py(game):
    assert _play_side_by_side(game, 900) > 50  # a silent run would test little


@pytest.mark.parametrize("game", ["space_invaders", "riverraid"])
def test_samples_come_once_per_act_with_ale_frame_skip(game):
    """With ALE's own frame_skip the writes of all its frames queue up and the 512 samples
    are made once, after the last frame."""
    assert _play_side_by_side(game, 400, frame_skip=4) > 50


def test_every_game_sounds_as_ale_py_briefly():
    """Every game ale-py can load, 150 acts each (the long runs above cover the paths)."""
    from hybridsim import games_table
    games = sorted(g["name"] for g in games_table.games() if g.get("ale_settings", True))
    heard = {game: _play_side_by_side(game, 150) for game in games}
    assert sum(n > 0 for n in heard.values()) >= 0.8 * len(games), heard


def test_without_sound_obs_the_samples_are_zeros_as_ale_pys():
    ref, ours = _pair("space_invaders", sound=False)
    for _ in range(100):
        ref.act(1)
        ours.act(1)
    assert ours.getAudioSize() == ref.getAudioSize() == 512
    assert np.array_equal(ours.getAudio(), ref.getAudio())
    assert not ours.getAudio().any()


def test_sound_obs_takes_effect_at_the_next_load_rom():
    """ALE makes its sound object in loadROM: setting sound_obs afterwards changes nothing
    until the next loadROM."""
    ref, ours = _pair("space_invaders", sound=False)
    for side in (ref, ours):
        side.setBool("sound_obs", True)
        for _ in range(200):
            side.act(1)
        assert not side.getAudio().any()
        side.loadROM(str(rom_path("space_invaders")))
        for _ in range(200):
            side.act(1)
    assert np.array_equal(ref.getAudio(), ours.getAudio()) and ours.getAudio().any()


def test_get_audio_into_a_buffer_and_bad_buffers():
    ref, ours = _pair("space_invaders")
    for _ in range(120):
        ref.act(1)
        ours.act(1)
    buffer = np.full(512, 7, np.uint8)
    assert ours.getAudio(buffer) is None
    assert np.array_equal(buffer, ref.getAudio())
    for bad in (np.zeros(100, np.uint8), np.zeros(512, np.int32), [0] * 512):
        with pytest.raises(TypeError):
            ref.getAudio(bad)
        with pytest.raises(TypeError):
            ours.getAudio(bad)
    with pytest.raises(RuntimeError, match="no ROM loaded"):
        ALEInterface().getAudio()  # ale-py crashes here


def test_gymnasium_sound_observations_equal_ale_pys():
    """AtariEnv(sound_obs=True): dict observations {"image", "sound"} as ale-py's, through
    an episode's end and reset."""
    gymnasium = pytest.importorskip("gymnasium")
    import hybridsim  # noqa: F401  (registers hybridsim/...)
    gymnasium.register_envs(ale_py)
    kwargs = dict(sound_obs=True, repeat_action_probability=0.25, max_num_frames_per_episode=1200)
    ref = gymnasium.make("ALE/SpaceInvaders-v5", **kwargs)
    ours = gymnasium.make("hybridsim/SpaceInvaders-v5", **kwargs)
    assert ours.observation_space == ref.observation_space

    def equal(a, b):
        return a.keys() == b.keys() == {"image", "sound"} and all(np.array_equal(a[k], b[k]) for k in a)
    obs_ref, _ = ref.reset(seed=5)
    obs_ours, _ = ours.reset(seed=5)
    assert equal(obs_ref, obs_ours)
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(700):
        action = int(rng.integers(ref.action_space.n))
        obs_ref, r_ref, term_ref, trunc_ref, _ = ref.step(action)
        obs_ours, r_ours, term_ours, trunc_ours, _ = ours.step(action)
        assert equal(obs_ref, obs_ours) and (r_ref, term_ref, trunc_ref) == (r_ours, term_ours, trunc_ours)
        if term_ref or trunc_ref:
            ends += 1
            obs_ref, _ = ref.reset()
            obs_ours, _ = ours.reset()
            assert equal(obs_ref, obs_ours)
    assert ends >= 1
