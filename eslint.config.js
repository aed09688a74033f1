// Lint rules: typescript-eslint's type-aware recommended set over the service, its tests, scripts,
// benchmarks and the listener agent. Formatting is Prettier's job (.prettierrc.json), not the linter's.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'node_modules/',
      'dist/',
      'packages/listener/dist/',
      'web/dist/',
      'test-results/',
      '.slipway/',
      'examples/',
      'packages/sdk/src/api-types.ts',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
  },
  {
    rules: {
      // Fastify plugins, hooks and handlers are async by contract (Fastify awaits what they return), and
      // many of them have nothing to await: the rule would make them sync and break that contract.
      '@typescript-eslint/require-await': 'off',
      // `{ dropped, ...rest }` is how a field is left out of a copy.
      '@typescript-eslint/no-unused-vars': ['error', { ignoreRestSiblings: true }],
    },
  },
  {
    // No module of the service over 500 lines (docs/architecture.md): a longer one holds more than one
    // concern.
    files: ['src/**/*.ts', 'packages/listener/src/**/*.ts'],
    rules: { 'max-lines': ['error', { max: 500 }] },
  },
  {
    // No function of the service over 150 lines (blank lines and comments aside): a longer one holds
    // more than one concern; split it into functions and modules named for theirs.
    files: ['src/**/*.ts', 'packages/listener/src/**/*.ts'],
    rules: { 'max-lines-per-function': ['error', { max: 150, skipBlankLines: true, skipComments: true }] },
  },
  {
    // node:test's test() and describe() return promises the runner awaits itself, and response bodies
    // in tests are untyped JSON read field by field: those two rule families add noise, not safety, there.
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/no-floating-promises': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-explicit-any': 'off',
    },
  },
  {
    files: ['**/*.js', '**/*.mjs'],
    ...tseslint.configs.disableTypeChecked,
  },
  {
    // The few plain scripts (bins, the app-side LangGraph server) run on Node.
    files: ['**/*.js', '**/*.mjs'],
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        Buffer: 'readonly',
        URL: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        fetch: 'readonly',
        // Web-standard globals of Node 20 (the MCP and A2A routes of the LangGraph server).
        Headers: 'readonly',
        Request: 'readonly',
        Response: 'readonly',
        ReadableStream: 'readonly',
        TextEncoder: 'readonly',
        TextDecoder: 'readonly',
        AbortSignal: 'readonly',
      },
    },
  },
);
