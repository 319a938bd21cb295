// Drives the coordinator's HTTP API with OpenAI's official JavaScript client and prints, as one JSON
// object, what the client library made of each answer (texts, finish reasons, usage, logprobs, and for
// refusals the error class and status it raised). http_api_test.py holds the results to the gRPC API's.
//   node openai_client.cjs NODE_MODULES CONFIG.json
'use strict';
const fs = require('fs');
const path = require('path');

const [, , nodeModules, configPath] = process.argv;
const OpenAI = require(path.join(nodeModules, 'openai'));
const cfg = JSON.parse(fs.readFileSync(configPath, 'utf8'));
const options = { baseURL: cfg.base_url, maxRetries: 0, timeout: 120000 };
const client = new OpenAI({ ...options, apiKey: cfg.api_key });
const stranger = new OpenAI({ ...options, apiKey: 'not-a-token' });
const model = cfg.model;
const greedy = { model, temperature: 0 };

async function attempt(fn) {
  try {
    return { ok: true, value: await fn() };
  } catch (e) {
    return { ok: false, class: e.constructor.name, status: e.status ?? null, code: e.code ?? null,
             type: e.type ?? null, message: e.message };
  }
}

function chatResult(r) {
  const c = r.choices[0];
  return { text: c.message.content, role: c.message.role, finish_reason: c.finish_reason, usage: r.usage,
           object: r.object, model: r.model };
}

async function collectStream(stream) {
  const out = { text: '', roles: [], finish_reason: null, usage: null, chunks: 0 };
  for await (const chunk of stream) {
    out.chunks += 1;
    if (chunk.usage) out.usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta && c.delta.role) out.roles.push(c.delta.role);
      if (c.delta && c.delta.content) out.text += c.delta.content;
      if (c.text) out.text += c.text;
      if (c.finish_reason) out.finish_reason = c.finish_reason;
    }
  }
  return out;
}

async function main() {
  const results = {};
  const n = cfg.max_tokens;
  results.models = await attempt(async () => (await client.models.list()).data.map((m) => m.id));
  results.chat = await attempt(async () =>
    chatResult(await client.chat.completions.create({ ...greedy, messages: cfg.messages, max_tokens: n })));
  results.chat_stream = await attempt(async () => collectStream(await client.chat.completions.create(
    { ...greedy, messages: cfg.messages, max_completion_tokens: n, stream: true,
      stream_options: { include_usage: true } })));
  results.chat_logprobs = await attempt(async () => {
    const r = await client.chat.completions.create(
      { ...greedy, messages: cfg.messages, max_tokens: n, logprobs: true, top_logprobs: 3 });
    return r.choices[0].logprobs.content.map((t) => ({ token: t.token, bytes: t.bytes, logprob: t.logprob,
                                                       top: t.top_logprobs.map((a) => a.logprob) }));
  });
  results.chat_stop = await attempt(async () => chatResult(await client.chat.completions.create(
    { ...greedy, messages: cfg.messages, max_tokens: n, stop: [cfg.stop_string] })));
  results.multi_turn = await attempt(async () =>
    chatResult(await client.chat.completions.create({ ...greedy, messages: cfg.multi_messages, max_tokens: n })));
  const sampled = { model, messages: cfg.messages, max_tokens: n, temperature: 1.0, top_p: 0.9, seed: 7 };
  results.sampled = await attempt(async () => [
    chatResult(await client.chat.completions.create(sampled)).text,
    chatResult(await client.chat.completions.create(sampled)).text,
    chatResult(await client.chat.completions.create({ ...sampled, seed: 8 })).text,
  ]);
  results.completion = await attempt(async () => {
    const r = await client.completions.create({ ...greedy, prompt: cfg.prompt, max_tokens: n });
    return { text: r.choices[0].text, finish_reason: r.choices[0].finish_reason, usage: r.usage, object: r.object };
  });
  results.completion_echo = await attempt(async () =>
    (await client.completions.create({ ...greedy, prompt: cfg.prompt, max_tokens: n, echo: true })).choices[0].text);
  results.completion_stream = await attempt(async () =>
    collectStream(await client.completions.create({ ...greedy, prompt: cfg.prompt, max_tokens: n, stream: true })));
  results.completion_ids = await attempt(async () =>
    (await client.completions.create({ ...greedy, prompt: cfg.prompt_ids, max_tokens: n })).choices[0].text);
  // Refusals: each must surface as the client library's error for its status.
  const user = [{ role: 'user', content: 'Hi' }];
  results.err_model = await attempt(() => client.chat.completions.create({ model: 'no-such-model', messages: user }));
  results.err_max_tokens = await attempt(() =>
    client.chat.completions.create({ ...greedy, messages: user, max_tokens: -1 }));
  results.err_n = await attempt(() => client.chat.completions.create({ ...greedy, messages: user, max_tokens: 2, n: 2 }));
  results.err_too_long = await attempt(() =>
    client.chat.completions.create({ ...greedy, messages: user, max_tokens: cfg.context }));
  results.err_role = await attempt(() =>
    client.chat.completions.create({ ...greedy, messages: [{ role: 'tool', content: 'x' }], max_tokens: 2 }));
  results.err_auth = await attempt(() => stranger.chat.completions.create({ ...greedy, messages: user, max_tokens: 2 }));
  results.err_auth_stream = await attempt(async () =>
    collectStream(await stranger.chat.completions.create({ ...greedy, messages: user, max_tokens: 2, stream: true })));
  process.stdout.write(JSON.stringify(results));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
