// The official `ollama` npm client against a running herd: chat and generate streaming, list, embed.
//   HERD_URL=http://127.0.0.1:PORT node test_js.mjs
import assert from 'node:assert/strict'
import { Ollama } from 'ollama'

const ollama = new Ollama({ host: process.env.HERD_URL })
const CHAT = 'smollm2:135m'
const TEXT = 'gemma3:270m'
const options = { temperature: 0, num_predict: 16 }
let failed = 0

async function check(name, fn) {
  try {
    await fn()
    console.log(`ok    ${name}`)
  } catch (e) {
    failed++
    console.log(`FAIL  ${name}: ${e.stack || e}`)
  }
}

await check('js_list', async () => {
  const { models } = await ollama.list()
  const names = models.map((m) => m.model)
  assert.ok(names.includes(CHAT) && names.includes(TEXT), names.join(','))
})

await check('js_chat_stream', async () => {
  const parts = []
  for await (const p of await ollama.chat({ model: CHAT, messages: [{ role: 'user', content: 'Say hello.' }], stream: true, options })) {
    parts.push(p)
  }
  assert.ok(parts.length > 2)
  assert.equal(parts.at(-1).done, true)
  assert.ok(parts.map((p) => p.message.content).join('').trim().length > 0)
})

await check('js_generate_stream', async () => {
  const parts = []
  for await (const p of await ollama.generate({ model: TEXT, prompt: 'The capital of France is', stream: true, options })) {
    parts.push(p)
  }
  assert.equal(parts.at(-1).done, true)
  assert.ok(parts.at(-1).eval_count > 0)
  assert.ok(parts.map((p) => p.response).join('').trim().length > 0)
})

await check('js_embed', async () => {
  const r = await ollama.embed({ model: TEXT, input: ['hello', 'world'] })
  assert.equal(r.embeddings.length, 2)
  assert.equal(r.embeddings[0].length, 640)
})

await check('js_error', async () => {
  await assert.rejects(ollama.chat({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e.status_code === 404)
})

console.log(`\njs client: ${failed ? failed + ' failed' : 'all ok'}`)
process.exit(failed ? 1 : 0)
