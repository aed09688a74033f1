/**
 * Everything `slipway` prints goes through here: results on stdout (tables for people, JSON with
 * `--json`), messages and progress on stderr, so `slipway deploy --json | jq` sees JSON only. Colours
 * only when the stream is a terminal and NO_COLOR is not set; the spinner only on a terminal.
 */
import { styleText } from 'node:util';
import ora, { type Ora } from 'ora';

type Style = (text: string) => string;

export interface Styles {
  bold: Style;
  dim: Style;
  red: Style;
  green: Style;
  yellow: Style;
  cyan: Style;
}

// The decision to colour is made here, per stream (isTTY, NO_COLOR, TERM=dumb from cli-config.ts), so
// styleText must not check a stream of its own (by default process.stdout, on Node versions that check).
const style =
  (format: Parameters<typeof styleText>[0]): Style =>
  (text) =>
    styleText(format, text, { validateStream: false });
const COLORS: Styles = {
  bold: style('bold'),
  dim: style('dim'),
  red: style('red'),
  green: style('green'),
  yellow: style('yellow'),
  cyan: style('cyan'),
};
const plain: Style = (text) => text;
const PLAIN: Styles = { bold: plain, dim: plain, red: plain, green: plain, yellow: plain, cyan: plain };

export interface OutputStreams {
  stdout: NodeJS.WriteStream;
  stderr: NodeJS.WriteStream;
}

/** A progress display: a spinner on a terminal, plain lines elsewhere (CI logs). */
export interface Progress {
  /** The current step ("Building"). */
  update(text: string): void;
  /** A line printed above the spinner (a build log line). */
  line(text: string): void;
  succeed(text: string): void;
  fail(text: string): void;
  stop(): void;
}

export interface Column<T> {
  header: string;
  value: (row: T) => string;
  style?: (value: string, row: T) => string;
}

export class Output {
  readonly json: boolean;
  /** Styles for stdout and for stderr (one may be a terminal and the other not). */
  readonly out: Styles;
  readonly err: Styles;
  readonly interactive: boolean;

  constructor(
    private readonly streams: OutputStreams,
    options: { json: boolean; noColor: boolean },
  ) {
    this.json = options.json;
    this.out = streams.stdout.isTTY && !options.noColor ? COLORS : PLAIN;
    this.err = streams.stderr.isTTY && !options.noColor ? COLORS : PLAIN;
    // A terminal without a size (a bare pseudo-terminal) cannot redraw a spinner line.
    this.interactive = streams.stderr.isTTY === true && (streams.stderr.columns ?? 0) > 0;
  }

  /** A line of the command's result, on stdout. */
  result(text: string): void {
    this.streams.stdout.write(`${text}\n`);
  }

  /** The command's result as JSON, on stdout. */
  data(value: unknown): void {
    this.streams.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
  }

  /** One JSON value per line, for streams (a followed log with --json). */
  record(value: unknown): void {
    this.streams.stdout.write(`${JSON.stringify(value)}\n`);
  }

  /** A message for the person at the terminal, on stderr. */
  note(text: string): void {
    this.streams.stderr.write(`${text}\n`);
  }

  warn(text: string): void {
    this.streams.stderr.write(`${this.err.yellow('warning:')} ${text}\n`);
  }

  error(text: string, details: string[] = []): void {
    this.streams.stderr.write(`${this.err.red('error:')} ${text}\n`);
    for (const line of details) this.streams.stderr.write(`  ${line}\n`);
  }

  /** Raw text for commander's own messages (help, usage errors). */
  write(stream: 'stdout' | 'stderr', text: string): void {
    this.streams[stream].write(text);
  }

  /** Rows as aligned columns with a header, or "No <what>." when there are none. */
  table<T>(rows: T[], columns: Column<T>[], what: string): void {
    if (rows.length === 0) {
      this.note(`No ${what}.`);
      return;
    }
    const cells = rows.map((row) => columns.map((column) => column.value(row)));
    const widths = columns.map((column, i) => Math.max(column.header.length, ...cells.map((row) => row[i]!.length)));
    const pad = (text: string, i: number) => (i === columns.length - 1 ? text : text.padEnd(widths[i]!));
    this.result(
      columns
        .map((column, i) => this.out.bold(pad(column.header, i)))
        .join('  ')
        .trimEnd(),
    );
    rows.forEach((row, r) => {
      const line = columns.map((column, i) => {
        const text = pad(cells[r]![i]!, i);
        return column.style ? column.style(text, row) : text;
      });
      this.result(line.join('  ').trimEnd());
    });
  }

  /** `name: value` lines, aligned. */
  fields(pairs: [string, string][]): void {
    const width = Math.max(...pairs.map(([name]) => name.length));
    for (const [name, value] of pairs) this.result(`${this.out.bold(`${name}:`.padEnd(width + 1))} ${value}`);
  }

  progress(text: string): Progress {
    const err = this.err;
    if (!this.interactive) {
      let last = '';
      const say = (line: string) => this.streams.stderr.write(`${line}\n`);
      say(text);
      last = text;
      return {
        update: (next) => {
          if (next !== last) say(next);
          last = next;
        },
        line: (line) => say(`  ${line.replace(/\n/g, '\n  ')}`),
        succeed: (done) => say(done),
        fail: (failed) => say(failed),
        stop: () => undefined,
      };
    }
    const spinner: Ora = ora({
      text,
      stream: this.streams.stderr,
      color: err === COLORS ? 'cyan' : false,
      discardStdin: false,
    }).start();
    return {
      update: (next) => {
        spinner.text = next;
      },
      line: (line) => {
        spinner.clear();
        this.streams.stderr.write(`${err.dim('│')} ${line.replace(/\n/g, `\n${err.dim('│')} `)}\n`);
        spinner.render();
      },
      succeed: (done) => void spinner.stopAndPersist({ symbol: err.green('✔'), text: done }),
      fail: (failed) => void spinner.stopAndPersist({ symbol: err.red('✖'), text: failed }),
      stop: () => void spinner.stop(),
    };
  }
}
