// What the tests of the disk tiers share (kv_cache.test.js: the prefix cache's folder;
// slots.test.js: saved slot files): their models and serve flags, serve's page size, the two
// turns whose second one extends the first, a stop that lets a server write its queued
// pages, and a local + remote split that both tests restart.
//
// Goals: one copy of the setup both files need. Non-goals: what either test checks (turns()
// only checks that its turn 1 spans more than a page).
import assert from 'node:assert/strict';
import path from 'node:path';
import { tokenize } from './client.js';
import { binary, fixtures, startServer, startShard } from './harness.js';

export const storiesModel = path.join(fixtures, 'stories260K.gguf');
export const qwenModel = path.join(fixtures, 'qwen3-tiny-f32.gguf');
export const kTestTimeout = 120_000;
export const kServeArgs = ['--parallel', '2', '-c', '2048', '-t', '2'];
export const kPageTokens = 64;  // serve's page size: what is cached or saved is whole pages

export const floorPage = (n) => Math.floor(n / kPageTokens) * kPageTokens;

// SIGTERM and a generous wait: a server writes the pages still queued before it exits.
export const stop = (child) => child.kill('SIGTERM', 30_000);

// Turn 1 is `text` cut to 64k + 10 tokens; turn 2 extends it, so exactly k pages are cached
// or saved for it (the 10 tokens past the boundary would need 54 more matching generated
// ones to fill a page).
export async function turns(server, text) {
  let t1 = await tokenize(server, text);
  t1 = t1.slice(0, floorPage(t1.length - 10) + 10);
  assert.ok(t1.length > kPageTokens, `turn 1 has ${t1.length} tokens`);
  const more = (await tokenize(server, ' The cat sat on the mat.')).slice(1);  // no BOS
  return { t1, t2: [...t1, ...more], cached2: floorPage(t1.length) };
}

// A qwen server with `args` whose stage 1 is a `shardlm shard` daemon on `socket`;
// server.stopSplit() stops the server (gracefully), then the daemon.
export async function startSplit(socket, args) {
  const shard = await startShard(binary, socket, 1);
  const server = await startServer(binary, qwenModel, [...args, '--devices', `cpu,unix:${socket}`]);
  server.stopSplit = async () => {
    await stop(server);
    await shard.kill();
  };
  return server;
}
