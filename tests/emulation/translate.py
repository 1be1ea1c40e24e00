#!/usr/bin/env python3
"""Rewrites a .cu file into C++ the emulation build compiles: kernel launches become emu::launch
calls and dynamic shared-memory declarations point into the emulated CTA's buffer."""
import re
import sys

source = open(sys.argv[1]).read()
launch = re.compile(r'^(\s*)(.+?)<<<(.+?)>>>\((.*)\);\s*$', re.M)
source = launch.sub(lambda m: f'{m.group(1)}::emu::launch(::emu::LaunchConfig{{{m.group(3)}}}, {m.group(2)}, {m.group(4)});', source)
dynamic = re.compile(r'extern __shared__ (?:__align__\(\d+\) )?([\w:][\w: ]*?) (\w+)\[\];')
source = dynamic.sub(lambda m: f'{m.group(1)}* {m.group(2)} = static_cast<{m.group(1)}*>(::emu::dynamic_smem());', source)
open(sys.argv[2], 'w').write(f'#line 1 "{sys.argv[1]}"\n' + source)
