"""What both worlds share: the contract a world implements (`pearl.world.contract`) and the
config sections both worlds' configs are built from (`pearl.world.sections`)."""
