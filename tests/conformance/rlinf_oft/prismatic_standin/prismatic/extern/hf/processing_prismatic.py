"""Base classes RLinf's ``rlinf/models/embodiment/prismatic/processing_prismatic.py`` subclasses; the runner
sets the attributes openvla-oft's ``PrismaticImageProcessor.__init__`` derives from the checkpoint's
``preprocessor_config.json`` (timm ``Resize(224, bicubic)`` + ``CenterCrop(224)`` + ``Normalize``)."""


class PrismaticImageProcessor:
    pass


class PrismaticProcessor:
    pass
