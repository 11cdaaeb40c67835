"""Emulator keyword arguments from a ROM's properties and its game's reset recipe.

`emulator_kwargs(entry, rom, mode=None)` turns one game record of data/games.json
(written by the game-settings work: "properties" from ALE's DefProps.hxx, "set_mode",
"starting_actions", "default_mode") into the keyword arguments of
hybridsim._console.Emulator, plus the cartridge image to pass.
"""
from hybridsim.carts import detect_cart_type
from hybridsim.roms import md5_hex


def _yes(value, yes="YES"):
    return str(value).upper() == yes


def _controller(value):
    return "PADDLES" if str(value).upper() == "PADDLES" else "JOYSTICK"


def mode_select_for(recipe, mode):
    """The Emulator's mode_select dict for a games.json "set_mode" recipe and a mode."""
    if recipe is None:
        return None
    custom = recipe.get("custom")
    if custom == "ms_pacman":  # two RAM bytes: the mode and a variant flag
        if mode == 0:
            return dict(ram=0x99, value=1, ram2=0xA1, value2=1, hold=10)
        return dict(ram=0x99, value=mode, ram2=0xA1, value2=0, hold=10)
    if custom == "double_dunk":  # menu walked with the joystick, in the console
        return {"custom": "double_dunk"}
    if custom == "adventure":  # random SELECT holds from the environment RNG, in the console
        return {"custom": "adventure"}
    if custom == "frogger":  # the mode byte counts 1, 3, 5
        return dict(ram=0xDD, value=1 + 2 * mode, hold=2)
    if custom == "human_cannonball":  # mode + 1 and a one-player game
        return dict(ram=0xB6, value=mode + 1, ram2=0xB7, value2=1, hold=2)
    if custom == "video_cube":  # mode = 100 * cube + variant; cube 0 keeps cube 1
        return {"custom": "video_cube", "value": (0, 2, 8)[mode % 100],
                "cube": mode // 100 if mode >= 100 else 1}
    if custom is not None:
        raise NotImplementedError(f"mode selection recipe {custom!r} is not implemented in the console yet")
    value = mode + recipe.get("offset", 0)
    if recipe.get("values") is not None:  # per-mode bytes (keys are strings in JSON)
        value = recipe["values"][str(mode)] if str(mode) in recipe["values"] else recipe["values"][mode]
    ram = recipe["ram"] + (0x100 if recipe.get("cart_ram") else 0)  # cartridge RAM byte
    spec = dict(ram=ram, value=value, hold=recipe.get("hold", 1))
    if recipe.get("ram2") is not None:
        spec["ram2"], spec["value2"] = recipe["ram2"], recipe.get("value2", 0)
    if recipe.get("also") is not None:
        spec["value_alt"] = mode + recipe["also"]
    before = []
    for step in recipe.get("before", ()):
        if step[0] == "act":
            before.append(("act", int(step[1]), int(step[2])))
        elif step[0] == "select":
            before.append(("select", int(step[1])))
        elif step[0] == "soft_reset":
            before.append(("soft_reset",))
        else:
            raise ValueError(f"unknown mode-select step {step!r}")
    spec["before"] = before
    return spec


def emulator_kwargs(entry, rom, mode=None, md5=None):
    """(image, kwargs) for Emulator(image, game_id, **kwargs) from a games.json record
    (`md5`: the ROM's, where the caller has it already)."""
    # Stella finds a cartridge's properties by its md5: an image matched by its file name
    # alone (a modified ROM, which ALE accepts with a warning) gets Stella's defaults
    props = entry["properties"] if (md5 or md5_hex(rom)) == entry["md5"] else {}
    cart, image = detect_cart_type(rom, props.get("Cartridge.Type", "AUTO-DETECT"))
    fmt = props.get("Display.Format", "AUTO-DETECT")
    mode = entry.get("default_mode", 0) if mode is None else mode
    kwargs = dict(
        cart_type=cart,
        ystart=int(props.get("Display.YStart", 34)),
        height=int(props.get("Display.Height", 210)),
        display_format="AUTO" if fmt.startswith("AUTO") else fmt,
        # ALE plugs a joystick into any port whose property is not PADDLES (e.g. NONE).
        left_controller=_controller(props.get("Controller.Left", "JOYSTICK")),
        right_controller=_controller(props.get("Controller.Right", "JOYSTICK")),
        swap_ports=_yes(props.get("Console.SwapPorts", "NO")),
        swap_paddles=_yes(props.get("Controller.SwapPaddles", "NO")),
        hmove_blanks=_yes(props.get("Emulation.HmoveBlanks", "YES")),
        left_difficulty=props.get("Console.LeftDifficulty", "B"),
        right_difficulty=props.get("Console.RightDifficulty", "B"),
        mode=mode,
        mode_select=mode_select_for(entry.get("set_mode"), mode),
        difficulty=entry.get("default_difficulty", 0),
        starting_actions=tuple(entry.get("starting_actions", ())),
    )
    return image, kwargs
