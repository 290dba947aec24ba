// End-to-end tests of the agent frameworks people build on: the Vercel AI SDK (through
// @ai-sdk/openai-compatible on chat completions, and @ai-sdk/openai on both the Responses API,
// its default, and chat) and LangChain JS (@langchain/openai's ChatOpenAI on chat completions
// and on the Responses API), against the real `shardlm serve` on the Qwen3-vocabulary fixture.
//
// Goals: an agent's tool loop finishes unchanged: the model is forced to call a tool by
// tool_choice, the framework runs the tool, sends the assistant's call back with the result,
// and the second turn answers; streamed and not. Structured output (generateObject,
// withStructuredOutput) returns objects that validate against the schema the user gave. The
// model has random weights, so every call and object below exists only because the server
// constrains the sampler: a server that ignored tool_choice or response_format fails here.
// Non-goals: the quality of the answers; the openai and Anthropic SDKs' own shapes
// (responses.test.js, anthropic.test.js, server.test.js).
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures; missing → skip (fail under CI).
// Binary: SHARDLM_BIN or ../../build/shardlm.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { createOpenAI } from '@ai-sdk/openai';
import { generateObject, generateText, stepCountIs, streamText, tool } from 'ai';
import { ChatOpenAI } from '@langchain/openai';
import { HumanMessage, ToolMessage } from '@langchain/core/messages';
import { tool as lcTool } from '@langchain/core/tools';
import { z } from 'zod';
import { binary, fixtures, killAll, skipReason, startServer } from './harness.js';

const model = path.join(fixtures, 'qwen3-tiny-qwenvocab-q8_0.gguf');
const kTestTimeout = 180_000;
const skip = skipReason('agent SDKs', [model]);

// What the tools and objects must be. Enums and bounded arrays keep a random model's output
// short (a free string may run to the token limit, which the SDKs rightly refuse as cut off).
const cityArgs = z.object({ city: z.enum(['Paris', 'Oslo', 'Lima']) }).strict();
const person = z.object({
  name: z.enum(['Ada', 'Alan', 'Grace']),
  age: z.number().int(),
  languages: z.array(z.enum(['en', 'fr', 'de'])).max(3),
  retired: z.boolean(),
}).strict();
const kMaxTokens = 96;

let server;
let aiCompatible; // Vercel AI SDK over chat completions
let aiOpenAI; // Vercel AI SDK's OpenAI provider: Responses API by default, .chat() for chat

before(async () => {
  if (skip) return;
  server = await startServer(binary, model, ['--parallel', '2', '-c', '4096', '-t', '2']);
  aiCompatible = createOpenAICompatible({
    name: 'shardlm', baseURL: `${server.base}/v1`, apiKey: 'none', supportsStructuredOutputs: true,
  });
  aiOpenAI = createOpenAI({ baseURL: `${server.base}/v1`, apiKey: 'none' });
});

after(killAll);

// The weather tool as the AI SDK declares it; `calls` records what the framework ran.
function aiWeatherTool(calls) {
  return tool({
    description: 'The weather in a city',
    inputSchema: cityArgs,
    execute: async (input) => {
      calls.push(cityArgs.parse(input));
      return `sunny in ${input.city}`;
    },
  });
}

// An AI SDK tool loop: step 1 must call get_weather (forced), step 2 answers without tools.
const aiLoopSettings = (languageModel, calls) => ({
  model: languageModel,
  tools: { get_weather: aiWeatherTool(calls) },
  toolChoice: { type: 'tool', toolName: 'get_weather' },
  prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: 'none' } : {}),
  stopWhen: stepCountIs(2),
  temperature: 0,
  maxOutputTokens: kMaxTokens,
  maxRetries: 0,
  prompt: 'What is the weather in Paris?',
});

function assertAiLoop(steps, calls, name) {
  assert.equal(steps.length, 2, `${name}: a tool step and an answering step`);
  assert.equal(steps[0].finishReason, 'tool-calls', name);
  assert.equal(steps[0].toolCalls.length, 1, name);
  assert.equal(steps[0].toolCalls[0].toolName, 'get_weather', name);
  assert.deepEqual(calls, [cityArgs.parse(steps[0].toolCalls[0].input)], name);
  assert.equal(steps[1].toolCalls.length, 0, name);
  assert.ok(['stop', 'length'].includes(steps[1].finishReason), `${name}: ${steps[1].finishReason}`);
}

const aiModels = () => [
  ['openai-compatible (chat)', aiCompatible('m')],
  ['openai provider (responses)', aiOpenAI('m')],
  ['openai provider (chat)', aiOpenAI.chat('m')],
];

test('AI SDK: generateText finishes a forced tool loop', { skip, timeout: kTestTimeout },
  async () => {
    for (const [name, languageModel] of aiModels()) {
      const calls = [];
      const r = await generateText(aiLoopSettings(languageModel, calls));
      assertAiLoop(r.steps, calls, name);
    }
  });

test('AI SDK: streamText finishes a forced tool loop', { skip, timeout: kTestTimeout },
  async () => {
    for (const [name, languageModel] of aiModels()) {
      const calls = [];
      const errors = [];
      const r = streamText({ ...aiLoopSettings(languageModel, calls), onError: (e) => errors.push(e) });
      let streamed = '';
      for await (const part of r.textStream) streamed += part;
      assert.deepEqual(errors, []);
      const steps = await r.steps;
      assertAiLoop(steps, calls, name);
      assert.equal(streamed, steps.map((s) => s.text).join(''));
    }
  });

test('AI SDK: generateObject returns an object of the schema', { skip, timeout: kTestTimeout },
  async () => {
    for (const [name, languageModel] of aiModels()) {
      const r = await generateObject({
        // Greedy: the Responses API has no seed, and the output must be the same every run.
        model: languageModel, schema: person, schemaName: 'person', temperature: 0,
        maxOutputTokens: 4 * kMaxTokens, maxRetries: 0, prompt: 'Describe a person.',
      });
      assert.deepEqual(person.parse(r.object), r.object, name);
      assert.equal(r.finishReason, 'stop', name);
    }
  });

// LangChain's ChatOpenAI on chat completions, or on the Responses API.
const chatOpenAI = (useResponsesApi, extra = {}) => new ChatOpenAI({
  model: 'm', apiKey: 'none', configuration: { baseURL: `${server.base}/v1` }, temperature: 0,
  maxTokens: kMaxTokens, maxRetries: 0, useResponsesApi, ...extra,
});

const lcWeather = lcTool(async ({ city }) => `sunny in ${city}`, {
  name: 'get_weather', description: 'The weather in a city', schema: cityArgs,
});

// A LangChain tool loop: the forced call, the tool run by hand as agents do, the answer.
async function lcLoop(useResponsesApi, streamed) {
  const llm = chatOpenAI(useResponsesApi);
  const ask = async (runnable, messages) => {
    if (!streamed) return runnable.invoke(messages);
    let whole;
    for await (const chunk of await runnable.stream(messages)) {
      whole = whole ? whole.concat(chunk) : chunk;
    }
    return whole;
  };
  const messages = [new HumanMessage('What is the weather in Oslo?')];
  const first = await ask(llm.bindTools([lcWeather], { tool_choice: 'get_weather' }), messages);
  assert.equal(first.tool_calls.length, 1, JSON.stringify(first));
  const call = first.tool_calls[0];
  assert.equal(call.name, 'get_weather');
  cityArgs.parse(call.args);
  assert.ok(call.id);
  messages.push(first, new ToolMessage({ tool_call_id: call.id, content: await lcWeather.invoke(call.args) }));
  const second = await ask(llm.bindTools([lcWeather], { tool_choice: 'none' }), messages);
  assert.equal(second.tool_calls?.length ?? 0, 0);
  assert.equal(typeof second.text, 'string');
}

for (const api of [false, true]) {
  const on = api ? 'the Responses API' : 'chat completions';
  test(`LangChain on ${on}: a forced tool loop, invoked and streamed`,
    { skip, timeout: kTestTimeout }, async () => {
      await lcLoop(api, false);
      await lcLoop(api, true);
    });

  test(`LangChain on ${on}: withStructuredOutput returns an object of the schema`,
    { skip, timeout: kTestTimeout }, async () => {
      for (const method of ['jsonSchema', 'functionCalling']) {
        // Greedy, so the output is the same on every run (a sampled one may run into the
        // token limit, and a cut-off call is no object); room for whitespace the grammar allows.
        const llm = chatOpenAI(api, { maxTokens: 4 * kMaxTokens });
        const structured = llm.withStructuredOutput(person, { name: 'person', method, strict: true });
        const got = await structured.invoke('Describe a person.');
        assert.ok(got, `${method}: no object`);
        assert.deepEqual(person.parse(got), got, method);
      }
    });
}
