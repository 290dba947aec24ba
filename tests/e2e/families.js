// What every model family's e2e test checks the same way: a local split and a remote stage (a
// `shardlm shard` daemon) answer with the text of the unsplit server.
import assert from 'node:assert/strict';
import path from 'node:path';
import { complete } from './client.js';
import { kServeArgs, stop } from './disk_tier.js';
import { binary, startServer, startShard } from './harness.js';

// `want` is the unsplit server's completion of `prompt` (answerTokens tokens); localSplit and
// remoteSplit are --layer-split values for `cpu,cpu` and `cpu,unix:<socket in tmp>`.
export async function expectSplitsGiveUnsplitText(
  { model, tmp, prompt, answerTokens, want, localSplit, remoteSplit },
) {
  const local = await startServer(binary, model,
    [...kServeArgs, '--devices', 'cpu,cpu', '--layer-split', localSplit]);
  const socket = path.join(tmp, `${path.basename(model, '.gguf')}.sock`);
  const shard = await startShard(binary, socket, 1);
  const remote = await startServer(binary, model,
    [...kServeArgs, '--devices', `cpu,unix:${socket}`, '--layer-split', remoteSplit]);
  try {
    assert.equal((await complete(local, prompt, answerTokens)).text, want.text);
    assert.equal((await complete(remote, prompt, answerTokens)).text, want.text);
  } finally {
    await Promise.all([local.kill(), stop(remote)]);
    await shard.kill();
  }
}
