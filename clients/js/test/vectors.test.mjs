// The clock model's shared vectors (clients/clock-vectors/vectors.json),
// written by the Rust model: this port must give the same bits.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { ClockModel, estimateOf } from "../skewscope-clock.js";

const vectors = JSON.parse(
  readFileSync(new URL("../../clock-vectors/vectors.json", import.meta.url), "utf8"),
);

for (const c of vectors.cases) {
  test(`shared vectors: ${c.name}`, () => {
    const model = new ClockModel({ nsPerUnit: 1 });
    let asked = 0;
    for (const op of c.ops) {
      if (op.op === "add") {
        const [t1, t2, t3, t4] = op.x;
        assert.equal(model.add({ t1, t2, t3, t4 }), op.valid, JSON.stringify(op));
      } else if (op.op === "forget_before") {
        model.forgetBefore(op.t);
      } else if (op.op === "at") {
        asked += 1;
        const got = model.interval(op.t);
        if (op.answer === null) {
          assert.equal(got, null, `no answer at ${op.t}`);
          continue;
        }
        assert.notEqual(got, null, `an answer at ${op.t}`);
        const e = estimateOf(got);
        const where = `at ${op.t}`;
        assert.equal(got.baseNs, op.answer.base, where);
        assert.ok(Object.is(got.extent.lo, op.answer.lo), `${where}: lo ${got.extent.lo} vs ${op.answer.lo}`);
        assert.ok(Object.is(got.extent.hi, op.answer.hi), `${where}: hi ${got.extent.hi} vs ${op.answer.hi}`);
        assert.ok(Object.is(got.extent.driftLo, op.answer.drift_lo), `${where}: drift_lo`);
        assert.ok(Object.is(got.extent.driftHi, op.answer.drift_hi), `${where}: drift_hi`);
        assert.equal(e.agentMinusMonoNs, op.answer.agent_minus_mono, where);
        assert.equal(e.boundNs, op.answer.bound, where);
      } else {
        assert.fail(`unknown op ${op.op}`);
      }
    }
    assert.equal(model.breaks, c.breaks);
    assert.ok(asked > 0);
  });
}
