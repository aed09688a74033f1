#!/usr/bin/env node
// The `slipway-listener` command: registers tsx (the agent is TypeScript run as-is, like the service)
// and starts listener/main.ts.
import { register } from 'tsx/esm/api';

register();
await import('./main.ts');
