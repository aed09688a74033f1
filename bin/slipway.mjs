#!/usr/bin/env node
// The `slipway` command: registers tsx (the CLI is TypeScript run as-is, like the service) and starts
// src/cli/main.ts.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');
