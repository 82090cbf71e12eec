"""The deterministic core: state, deciders and appliers as pure functions over commands and events."""
