// End-to-end tests of `/v1/embeddings` and of `echo` with `logprobs` on `/v1/completions`:
// the real `shardlm serve` on fixture models, driven by the official `openai` npm client.
//
// Goals: what a user's client sees: `client.embeddings.create` with one input and many, text
// and token ids, the client's default base64 encoding and floats (the same vectors), unit
// vectors, equal vectors for equal inputs, a batch equal to its inputs one by one, usage; the
// errors (a server without --embeddings, an input longer than the context, dimensions, an
// empty input); embeddings and completions at once, each what it is alone; the vectors
// against llama.cpp's (`llama-server --embeddings --pooling mean`) within a tolerance derived
// below; echo + logprobs: the prompt's logprobs against llama.cpp's logits of the fixtures,
// ahead of the completion's, streamed and not.
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures (missing → skip; fail under CI=true).
// llama.cpp: SHARDLM_ORACLE (a folder) or ../../../shared/oracle; it is a reference to
// measure against, not a requirement, so without it (or on a CPU without the AVX-512 subsets
// it was built for) that one test skips, under CI=true too.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { binary, fixtures, killAll, skipReason, startHttp, startServer } from './harness.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const oracleDir = process.env.SHARDLM_ORACLE ?? path.resolve(here, '../../../shared/oracle');
const oracleBinary = path.join(oracleDir, 'llama-server');
const stories = path.join(fixtures, 'stories260K.gguf');
const qwen = path.join(fixtures, 'qwen3-tiny-f32.gguf');
const llamaF16 = path.join(fixtures, 'llama-tiny-spm.gguf');
const goldenFile = path.join(fixtures, 'golden.json');
const tolerancesFile = path.join(fixtures, 'tolerances.json');
const kTestTimeout = 120_000;

const skip = skipReason('embeddings', [stories, qwen, llamaF16, goldenFile, tolerancesFile]);

// The instruction sets the oracle's README says its binaries were built with.
const kOracleCpuFlags = ['avx2', 'fma', 'f16c', 'bmi2', 'avx512f', 'avx512bw', 'avx512vl',
  'avx512dq', 'avx512vbmi', 'avx512_vnni', 'avx512_bf16'];

function oracleSkipReason() {
  if (skip) return skip;
  if (!fs.existsSync(oracleBinary)) return `embeddings vs llama.cpp skipped: no ${oracleBinary}`;
  let cpuinfo = '';
  try {
    cpuinfo = fs.readFileSync('/proc/cpuinfo', 'utf8');
  } catch { /* not Linux: the flags below are all missing */ }
  const flags = new Set((/^flags\s*:(.*)$/m.exec(cpuinfo)?.[1] ?? '').trim().split(/\s+/));
  const lacking = kOracleCpuFlags.filter((f) => !flags.has(f));
  if (lacking.length > 0) {
    return `embeddings vs llama.cpp skipped: this CPU lacks ${lacking.join(' ')}`;
  }
  return false;
}
const skipOracle = oracleSkipReason();

const clientOf = (base) =>
  new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });

// Embeddings on, F32 K and V as llama.cpp's goldens; one thread each (the files run at once).
const servers = {};
before(async () => {
  if (skip) return;
  const flags = ['--embeddings', '--kv-type', 'f32', '-t', '1', '-c', '256', '--parallel', '4'];
  [servers.stories, servers.qwen, servers.llamaF16, servers.plain] = await Promise.all([
    startServer(binary, stories, flags),
    startServer(binary, qwen, flags),
    startServer(binary, llamaF16, flags),
    startServer(binary, stories, ['-t', '1', '-c', '256']),
  ]);
});

after(async () => {
  await killAll();
});

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

test('embeddings: unit vectors, equal for equal inputs, a batch equal to its inputs alone',
  { skip, timeout: kTestTimeout }, async () => {
    const client = clientOf(servers.stories.base);
    // The client asks for base64 unless told otherwise, and decodes it to numbers.
    const one = await client.embeddings.create({ model: 'm', input: 'Once upon a time' });
    assert.equal(one.object, 'list');
    assert.equal(one.data.length, 1);
    assert.equal(one.data[0].object, 'embedding');
    assert.equal(one.data[0].index, 0);
    assert.equal(one.data[0].embedding.length, 64);  // stories260K: n_embd 64
    assert.ok(Math.abs(norm(one.data[0].embedding) - 1) < 1e-6);
    assert.equal(one.usage.prompt_tokens, 5);  // BOS + 4 tokens
    assert.equal(one.usage.total_tokens, 5);
    const again = await client.embeddings.create({ model: 'm', input: 'Once upon a time' });
    assert.deepEqual(again.data[0].embedding, one.data[0].embedding);

    const inputs = ['Once upon a time', 'Lily and Ben went to the park.', 'One day',
      'Once upon a time'];
    const many = await client.embeddings.create({ model: 'm', input: inputs,
      encoding_format: 'float' });
    assert.deepEqual(many.data.map((d) => d.index), [0, 1, 2, 3]);
    for (const [i, d] of many.data.entries()) {
      assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-6, `${i}`);
      // Bitwise what the input gives alone (and floats what base64 gives).
      const alone = await client.embeddings.create({ model: 'm', input: inputs[i] });
      assert.deepEqual(d.embedding, alone.data[0].embedding, `${i}`);
    }
    assert.deepEqual(many.data[3].embedding, one.data[0].embedding);
    assert.notDeepEqual(many.data[1].embedding, many.data[0].embedding);
    assert.equal(many.usage.prompt_tokens,
      (await Promise.all(inputs.map((input) => client.embeddings.create({ model: 'm', input }))))
        .reduce((sum, r) => sum + r.usage.prompt_tokens, 0));

    const ids = await (await fetch(`${servers.stories.base}/tokenize`, {
      method: 'POST', body: JSON.stringify({ content: inputs[1], add_special: true }),
    })).json();
    const byIds = await client.embeddings.create({ model: 'm', input: [ids.tokens, [1, 403]] });
    assert.deepEqual(byIds.data[0].embedding, many.data[1].embedding);
    assert.equal(byIds.usage.prompt_tokens, ids.tokens.length + 2);
    const byIdsOne = await client.embeddings.create({ model: 'm', input: ids.tokens });
    assert.deepEqual(byIdsOne.data[0].embedding, many.data[1].embedding);
  });

test('embeddings: errors a client sees', { skip, timeout: kTestTimeout }, async () => {
  const off = clientOf(servers.plain.base);
  await assert.rejects(off.embeddings.create({ model: 'm', input: 'x' }), (e) => {
    assert.equal(e.status, 400);
    assert.match(e.message, /--embeddings/);
    return true;
  });
  const client = clientOf(servers.stories.base);
  const refused = async (body, status, param, code) => {
    await assert.rejects(client.embeddings.create({ model: 'm', ...body }), (e) => {
      assert.equal(e.status, status, JSON.stringify(body));
      assert.equal(e.param, param, JSON.stringify(body));
      if (code) assert.equal(e.code, code);
      return true;
    });
  };
  // 800 characters: more tokens than the context's 256 positions.
  await refused({ input: ['ok', 'x '.repeat(400)] }, 400, 'input[1]', 'context_length_exceeded');
  await refused({ input: 'x', dimensions: 64 }, 400, 'dimensions');
  await refused({ input: ['a', ''] }, 400, 'input[1]');
  await refused({ input: [[1, 2], [100000]] }, 400, 'input[1]');
  await refused({ input: 'x', encoding_format: 'hex' }, 400, 'encoding_format');
});

// Completions and embeddings at once on a server with 4 slots: each response is bitwise what
// the request gets alone (the engine batches them together; their rows never mix).
test('embeddings and completions at once are each what they are alone',
  { skip, timeout: kTestTimeout }, async () => {
    const client = clientOf(servers.stories.base);
    const completion = { model: 'm', prompt: 'Once upon a time', temperature: 0, max_tokens: 48,
      ignore_eos: true, logprobs: 2 };
    const inputs = Array.from({ length: 12 }, (_, i) => `Tim and Lily played ${i} games.`);
    const embed = { model: 'm', input: inputs, encoding_format: 'float' };
    const soloText = await client.completions.create(completion);
    const soloEmbed = await client.embeddings.create(embed);
    for (let round = 0; round < 3; ++round) {
      const [text, vectors, streamed] = await Promise.all([
        client.completions.create(completion),
        client.embeddings.create(embed),
        client.completions.create({ ...completion, stream: true }).then(async (stream) => {
          let s = '';
          for await (const chunk of stream) s += chunk.choices[0]?.text ?? '';
          return s;
        }),
      ]);
      assert.equal(text.choices[0].text, soloText.choices[0].text);
      assert.deepEqual(text.choices[0].logprobs, soloText.choices[0].logprobs);
      assert.equal(streamed, soloText.choices[0].text);
      assert.deepEqual(vectors.data, soloEmbed.data);
    }
  });

// llama-server (the fixtures' commit) with the same settings: mean pooling, F32 K and V, one
// thread, one slot; it normalises with L2 as OpenAI's API does.
function startOracle(model) {
  return startHttp(oracleBinary, (port) => ['-m', model, '--embeddings', '--pooling', 'mean',
    '-t', '1', '-np', '1', '-c', '512', '-fa', 'off', '-ctk', 'f32', '-ctv', 'f32',
    '--port', String(port)]);
}

// The tolerance, per model, from the fixtures' logits tolerance (tolerances.json): each
// engine's logits are within `atol` of a float64 reference, on logits of standard deviation
// `logit_std`, a relative error of atol / logit_std. The logits are the LM head applied to
// the rows pooled here (the output-normed hidden state), so those rows, their mean and the
// unit vector made of it carry the same relative error: two engines' unit vectors may differ
// by twice that in any component, and in cosine by half their squared distance,
// n × component² / 2. stories260K: 2.4e-5 per component, 1.9e-8 in cosine; qwen3-tiny-f32:
// 9.6e-5 and 1.2e-6; llama-tiny-spm (F16 weights): 7.7e-3 and 7.6e-3.
function tolerances(model) {
  const t = JSON.parse(fs.readFileSync(tolerancesFile, 'utf8'));
  const name = path.basename(model);
  const component = (2 * t.suggested[name].atol) / t.observed[name].plain.logit_std;
  return { component, cosine: (n) => (n * component * component) / 2 };
}

test('embeddings match llama.cpp (llama-server --embeddings --pooling mean)',
  { skip: skipOracle, timeout: kTestTimeout }, async () => {
    const inputs = [
      'Once upon a time',
      'Lily and Ben went to the park to play with a big red ball.',
      'x',
      'Once upon a time, there was a little dog named Max. He liked to run in the park with ' +
        'his friend Lily. One day they found a big red ball under a tree.',
    ];
    for (const [name, model] of [['stories', stories], ['qwen', qwen], ['llamaF16', llamaF16]]) {
      const oracle = await startOracle(model);
      try {
        const body = { model: 'm', input: inputs, encoding_format: 'float' };
        const ours = await clientOf(servers[name].base).embeddings.create(body);
        const theirs = await clientOf(oracle.base).embeddings.create(body);
        assert.equal(ours.usage.prompt_tokens, theirs.usage.prompt_tokens, name);
        let worst = 0;
        let worstCos = 0;
        for (let i = 0; i < inputs.length; ++i) {
          const a = ours.data[i].embedding;
          const b = theirs.data.find((d) => d.index === i).embedding;
          assert.equal(a.length, b.length);
          let dot = 0;
          for (let k = 0; k < a.length; ++k) {
            worst = Math.max(worst, Math.abs(a[k] - b[k]));
            dot += a[k] * b[k];
          }
          worstCos = Math.max(worstCos, 1 - dot / (norm(a) * norm(b)));
        }
        const tol = tolerances(model);
        const n = ours.data[0].embedding.length;
        console.log(`${path.basename(model)}: max |ours - llama.cpp| = ` +
          `${worst.toExponential(2)} (tolerance ${tol.component.toExponential(2)}), ` +
          `max 1 - cosine = ${worstCos.toExponential(2)} (tolerance ` +
          `${tol.cosine(n).toExponential(2)}) over ${inputs.length} inputs`);
        assert.ok(worst <= tol.component, `${name}: max component difference ${worst}`);
        assert.ok(worstCos <= tol.cosine(n), `${name}: 1 - cosine ${worstCos}`);
      } finally {
        await oracle.kill('SIGKILL');
      }
    }
  });

// log-softmax of one row of logits, in double.
function logSoftmax(row) {
  let max = -Infinity;
  for (const x of row) max = Math.max(max, x);
  let sum = 0;
  for (const x of row) sum += Math.exp(x - max);
  const lse = max + Math.log(sum);
  return Array.from(row, (x) => x - lse);
}

// The prompt's logprobs against llama.cpp's logits of every prompt position (the fixtures'
// all_logits): token i's logprob is row i - 1's log-softmax at token i. Both engines' logits
// are within `atol` of float64, so a logprob (a logit minus the log-sum-exp of its row)
// within 2 × atol of each other.
test('echo with logprobs: the prompt\'s logprobs are llama.cpp\'s', { skip, timeout: kTestTimeout },
  async () => {
    const golden = JSON.parse(fs.readFileSync(goldenFile, 'utf8'));
    const atol = JSON.parse(fs.readFileSync(tolerancesFile, 'utf8')).suggested;
    for (const [name, model] of [['stories', stories], ['qwen', qwen]]) {
      const entry = golden.entries.find((e) => e.model === path.basename(model) &&
        e.all_logits_file);
      const [nRows, nVocab] = entry.all_logits_shape;
      const bytes = fs.readFileSync(path.join(fixtures, entry.all_logits_file));
      const logits = new Float32Array(bytes.buffer, bytes.byteOffset, nRows * nVocab);
      const tol = 2 * atol[entry.model].atol;
      const r = await clientOf(servers[name].base).completions.create({
        model: 'm', prompt: entry.prompt_ids, echo: true, logprobs: 5, max_tokens: 0,
      });
      assert.equal(r.choices[0].finish_reason, 'length');
      assert.equal(r.usage.completion_tokens, 0);
      const lp = r.choices[0].logprobs;
      assert.equal(lp.token_logprobs.length, entry.prompt_ids.length);
      assert.equal(lp.token_logprobs[0], null);
      assert.equal(lp.top_logprobs[0], null);
      let worst = 0;
      for (let i = 1; i < entry.prompt_ids.length; ++i) {
        const want = logSoftmax(logits.subarray((i - 1) * nVocab, i * nVocab));
        const diff = Math.abs(lp.token_logprobs[i] - want[entry.prompt_ids[i]]);
        worst = Math.max(worst, diff);
        assert.ok(diff <= tol, `${name} token ${i}: ${lp.token_logprobs[i]} vs ` +
          `${want[entry.prompt_ids[i]]}`);
        // The alternatives: the likeliest five (two pieces may render alike and share a key).
        const top5 = [...want].sort((a, b) => b - a).slice(0, 5);
        const got = Object.values(lp.top_logprobs[i]).sort((a, b) => b - a);
        assert.ok(got.length >= 1 && got.length <= 5, `${name} token ${i}: ${got}`);
        assert.ok(Math.abs(got[0] - top5[0]) <= tol, `${name} token ${i}: ${got[0]} vs ${top5[0]}`);
        for (const v of got) {
          assert.ok(top5.some((w) => Math.abs(v - w) <= tol), `${name} token ${i}: ${v}`);
        }
      }
      console.log(`${entry.model} ${entry.prompt_id}: max |prompt logprob - llama.cpp's| = ` +
        `${worst.toExponential(2)} (tolerance ${tol.toExponential(2)}) over ` +
        `${entry.prompt_ids.length - 1} tokens`);
    }
  });

test('echo with logprobs: the prompt\'s lead the completion\'s, streamed and not',
  { skip, timeout: kTestTimeout }, async () => {
    const client = clientOf(servers.stories.base);
    const body = { model: 'm', prompt: 'Once upon a time', echo: true, logprobs: 2,
      temperature: 0, max_tokens: 6, ignore_eos: true };
    const r = await client.completions.create(body);
    const choice = r.choices[0];
    const lp = choice.logprobs;
    const nPrompt = r.usage.prompt_tokens;
    assert.equal(lp.tokens.length, nPrompt + r.usage.completion_tokens);
    assert.equal(lp.token_logprobs.length, lp.tokens.length);
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    for (let i = 1; i < lp.tokens.length; ++i) {
      assert.ok(lp.token_logprobs[i] <= 0, `${i}: ${lp.token_logprobs[i]}`);
      assert.equal(Object.keys(lp.top_logprobs[i]).length, 2, `${i}`);
    }
    // The completion's own entries are those of the same request without echo.
    const plain = await client.completions.create({ ...body, echo: false });
    assert.equal(choice.text, 'Once upon a time' + plain.choices[0].text);
    assert.deepEqual(lp.tokens.slice(nPrompt), plain.choices[0].logprobs.tokens);
    assert.deepEqual(lp.token_logprobs.slice(nPrompt), plain.choices[0].logprobs.token_logprobs);
    // The prompt is scored whole every time (never from the prefix cache): the same numbers.
    assert.deepEqual((await client.completions.create(body)).choices[0].logprobs, lp);

    // Streamed: the echo chunk carries the prompt's entries; all chunks together, the same.
    const got = { tokens: [], token_logprobs: [], top_logprobs: [] };
    let text = '';
    let first = null;
    for await (const chunk of await client.completions.create({ ...body, stream: true })) {
      const c = chunk.choices[0];
      if (!c) continue;
      text += c.text;
      if (!c.logprobs) continue;
      first ??= c;
      for (const key of Object.keys(got)) got[key].push(...c.logprobs[key]);
    }
    assert.equal(first.text, 'Once upon a time');
    assert.equal(first.logprobs.tokens.length, nPrompt);
    assert.equal(text, choice.text);
    assert.deepEqual(got, lp);
  });
