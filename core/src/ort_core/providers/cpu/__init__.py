"""The built-in CPU execution provider: numpy kernels registered through the plugin hooks."""
