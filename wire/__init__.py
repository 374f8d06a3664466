"""MRC packet formats, the one definition of every layout in docs/wire-format.md.

`import wire` gives the codec's public API (frames, transport headers, constants); the
modules behind it: `wire.layout` (byte offsets, lengths, DSCP/ECN classes), `wire.frame`
(the Ethernet/IPv6/IPv6/UDP encapsulation), `wire.packets` (opcodes, codes and the header and
packet dataclasses), `wire.codec` (BTH and its extensions to and from bytes) and
`wire.layers` (scapy layers for crafting and reading packets by hand; imports scapy).
"""

from wire import codec, frame, layout, packets
from wire.codec import *  # noqa: F401,F403 (each module's __all__ is its public list)
from wire.frame import *  # noqa: F401,F403
from wire.layout import *  # noqa: F401,F403
from wire.packets import *  # noqa: F401,F403

__all__ = [*codec.__all__, *frame.__all__, *layout.__all__, *packets.__all__]
