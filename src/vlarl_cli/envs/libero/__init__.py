"""LIBERO benchmark support (see ``vlarl_cli.envs`` for the module map). Importing this is cheap."""
