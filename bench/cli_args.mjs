// Command-line helpers of the benchmark clients (load_gen.mjs, prefix_cache_client.mjs):
// `--name value` / `--name=value` flags, bounded integers, and messages on stderr under
// the client's name. A wrong flag ends the process with status 2.

export function cliTools(name) {
  const fail = (msg) => {
    process.stderr.write(`${name}: ${msg}\n`);
    process.exit(2);
  };
  const log = (msg) => process.stderr.write(`${name}: ${msg}\n`);

  // Flags into an object; bare arguments into `_` when allowed, else an error.
  const parseArgs = (argv, { positional = false } = {}) => {
    const out = { _: [] };
    for (let i = 0; i < argv.length; i++) {
      const a = argv[i];
      if (!a.startsWith('--')) {
        if (!positional) fail(`unexpected argument ${a}`);
        out._.push(a);
        continue;
      }
      const eq = a.indexOf('=');
      if (eq > 0) out[a.slice(2, eq)] = a.slice(eq + 1);
      else if (i + 1 < argv.length) out[a.slice(2)] = argv[++i];
      else fail(`${a} needs a value`);
    }
    return out;
  };

  const boundedInt = (v, dflt, lo, hi, flag) => {
    if (v === undefined) return dflt;
    const n = Number.parseInt(v, 10);
    if (!Number.isFinite(n) || n < lo || n > hi) fail(`${flag}: expected ${lo}..${hi}, got ${v}`);
    return n;
  };

  return { fail, log, parseArgs, boundedInt };
}

// x rounded to d decimals; null for a missing or non-finite value.
export function round(x, d = 2) {
  if (x === null || x === undefined || !Number.isFinite(x)) return null;
  const f = 10 ** d;
  return Math.round(x * f) / f;
}
