// The sample saga's payment participant in TypeScript (kafkajs, pg, the CloudEvents SDK), written
// from docs/protocol.md alone: the same behaviour as the C++ sagaflow-payment-service, so the demo
// and the tests can run either. Replies leave through the outbox table, published by `sagaflow relay`.
import { randomUUID } from "node:crypto";
import { CloudEvent, Kafka as CeKafka } from "cloudevents";
import { Consumer, Kafka, logLevel, KafkaMessage, Partitioners, Producer } from "kafkajs";
import { Pool, PoolClient } from "pg";
import { Options, parseOptions } from "./options";

type Outcome = "success" | "failure" | "retry";
interface Reply {
  outcome: Outcome;
  [field: string]: unknown;
}
interface Command {
  id: string;
  type: string;
  sagaId: string;
  stepName: string;
  phase: "action" | "compensation";
  data: Record<string, unknown>;
  traceparent?: string;
  tracestate?: string;
}
type Handler = (db: PoolClient, command: Command) => Promise<Reply>;

const log = (message: string) => process.stderr.write(`payment-ts: ${message}\n`);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

// --- The business: charges and refunds, with the table's UNIQUE as money's second guard ----------

function paymentHandlers(options: Options): Map<string, Handler> {
  const unavailableOnce = new Set<string>(); // orders answered "retry" already
  const slow = new Map(options.slowOrders); // order -> ms, for its first charge only
  const handlers = new Map<string, Handler>();
  handlers.set("action ChargePayment.v1", async (db, c) => {
    const orderId = String(c.data.orderId ?? "");
    const amount = String(c.data.amount ?? "0");
    const delay = slow.get(orderId);
    if (delay !== undefined) {
      slow.delete(orderId);
      await new Promise((resolve) => setTimeout(resolve, delay)); // the provider is slow
    }
    if (options.retryOrders && orderId.startsWith(options.retryOrders) && !unavailableOnce.has(orderId)) {
      unavailableOnce.add(orderId);
      return { outcome: "retry", reason: "the payment provider is unavailable" };
    }
    if (Number(amount) > options.limit) {
      return { outcome: "failure", reason: `declined: ${amount} is over the customer's limit` };
    }
    const provider = String(c.data.paymentProvider ?? "stub-pay");
    const externalId = String(c.data.externalPaymentId ?? orderId);
    const inserted = await db.query(
      `INSERT INTO payment (saga_id, order_id, customer_id, amount, currency, payment_provider, external_payment_id,
                            status)
       VALUES ($1, $2, $3, $4, $5, $6, $7, 'charged') ON CONFLICT DO NOTHING RETURNING payment_id::text`,
      [c.sagaId, orderId, Number(c.data.customerId ?? 0), amount, String(c.data.currency ?? "EUR"), provider,
       externalId],
    );
    if (inserted.rows.length > 0) return { outcome: "success", paymentId: inserted.rows[0].payment_id };
    // The UNIQUE (payment_provider, external_payment_id) caught a second charge: observe the first.
    const existing = await db.query(
      "SELECT payment_id::text FROM payment WHERE payment_provider = $1 AND external_payment_id = $2",
      [provider, externalId],
    );
    return { outcome: "success", paymentId: existing.rows[0].payment_id, existing: true };
  });
  handlers.set("compensation RefundPayment.v1", async (db, c) => {
    // paymentId is null when the engine never learnt the charge's outcome: find it by saga.
    const paymentId = typeof c.data.paymentId === "string" ? c.data.paymentId : null;
    const rows = await db.query(
      `SELECT payment_id::text FROM payment
       WHERE (payment_id::text = $1 OR ($1::text IS NULL AND saga_id = $2::uuid)) AND saga_id = $2::uuid`,
      [paymentId, c.sagaId],
    );
    for (const row of rows.rows) {
      await db.query("INSERT INTO refund (payment_id, saga_id) VALUES ($1, $2) ON CONFLICT DO NOTHING", [
        row.payment_id,
        c.sagaId,
      ]);
      await db.query("UPDATE payment SET status = 'refunded' WHERE payment_id = $1", [row.payment_id]);
    }
    return { outcome: "success", refunded: rows.rows.length };
  });
  return handlers;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS payment (
  payment_id           uuid          PRIMARY KEY DEFAULT gen_random_uuid(),
  saga_id              uuid          NOT NULL,
  order_id             text          NOT NULL,
  customer_id          bigint        NOT NULL,
  amount               numeric(12,2) NOT NULL,
  currency             text          NOT NULL,
  payment_provider     text          NOT NULL,
  external_payment_id  text          NOT NULL,
  status               text          NOT NULL CHECK (status IN ('charged', 'refunded')),
  created_at           timestamptz   NOT NULL DEFAULT now(),
  UNIQUE (payment_provider, external_payment_id));
CREATE TABLE IF NOT EXISTS refund (
  payment_id   uuid        PRIMARY KEY REFERENCES payment (payment_id),
  saga_id      uuid        NOT NULL,
  refunded_at  timestamptz NOT NULL DEFAULT now());`;

// --- The protocol: docs/protocol.md, "What a participant must do with each command" -------------

// sagaflow's readers refuse JSON nested deeper than this (docs/protocol.md); so does this service,
// before anything recursive (JSON.stringify, the pg driver) touches the value.
const MAX_JSON_DEPTH = 64;

// How deeply arrays and objects nest in `value`, counted without recursion.
function depthOf(value: unknown): number {
  let deepest = 0;
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [item, depth] = stack.pop()!;
    if (item === null || typeof item !== "object") continue;
    deepest = Math.max(deepest, depth);
    if (deepest > MAX_JSON_DEPTH) return deepest;
    for (const child of Object.values(item as Record<string, unknown>)) stack.push([child, depth + 1]);
  }
  return deepest;
}

class Participant {
  private readonly commandsTopic: string;
  private readonly group: string;
  private readonly failures = new Map<string, number>(); // "partition@offset" -> failed attempts

  constructor(
    private readonly options: Options,
    private readonly pool: Pool,
    private readonly handlers: Map<string, Handler>,
    private readonly deadLetters: Producer,
  ) {
    this.commandsTopic = `${options.name}.commands`;
    this.group = options.consumerGroup ?? `sagaflow-participant-${options.name}`;
  }

  get topic(): string {
    return this.commandsTopic;
  }

  get groupId(): string {
    return this.group;
  }

  // One record: a command handled in one transaction, or a dead letter. Throws (the record is read
  // again) when the database fails, up to three times for the same record.
  async onRecord(partition: number, message: KafkaMessage): Promise<void> {
    const where = `${this.commandsTopic}/${partition}@${message.offset}`;
    let command: Command;
    try {
      command = this.parse(message);
    } catch (e) {
      await this.deadLetter(message, where, (e as Error).message);
      return;
    }
    try {
      await this.handle(command);
      this.failures.delete(where);
    } catch (e) {
      const attempts = (this.failures.get(where) ?? 0) + 1;
      this.failures.set(where, attempts);
      if (attempts < 3) throw e; // kafkajs reads the record again
      this.failures.delete(where);
      await this.deadLetter(message, where, `handler failed ${attempts} times: ${(e as Error).message}`);
    }
  }

  private parse(message: KafkaMessage): Command {
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(message.headers ?? {})) {
      if (value !== undefined) headers[name] = Array.isArray(value) ? String(value[value.length - 1]) : String(value);
    }
    const value = message.value?.toString() ?? "";
    const record = { headers, key: message.key?.toString() ?? "", value, body: value };
    const event = CeKafka.toEvent(record as Parameters<typeof CeKafka.toEvent>[0]) as CloudEvent<unknown>;
    const attribute = (name: string) => {
      const value = (event as unknown as Record<string, unknown>)[name];
      return typeof value === "string" ? value : "";
    };
    if (!UUID.test(event.id)) throw new Error("id is not a UUID");
    const phase = attribute("phase");
    if (!UUID.test(attribute("sagaid")) || !attribute("stepname") || (phase !== "action" && phase !== "compensation")) {
      throw new Error("not a saga command: sagaid, stepname and phase (action or compensation) are required");
    }
    const data = typeof event.data === "string" ? JSON.parse(event.data) : event.data;
    if (depthOf(data) > MAX_JSON_DEPTH) {
      throw new Error(`data nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels`);
    }
    return {
      id: event.id,
      type: event.type,
      sagaId: attribute("sagaid"),
      stepName: attribute("stepname"),
      phase,
      data: data && typeof data === "object" ? (data as Record<string, unknown>) : {},
      traceparent: attribute("traceparent") || undefined,
      tracestate: attribute("tracestate") || undefined,
    };
  }

  private async handle(c: Command): Promise<void> {
    const db = await this.pool.connect();
    try {
      await db.query("BEGIN");
      // 1. The inbox: kept whatever the outcome; a redelivery goes on to be answered.
      await db.query(
        "INSERT INTO processed_event (consumer_name, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        [this.group, c.id],
      );
      // 2. A stored reply is sent again, with its original id.
      const stored = await this.stored(db, c, c.phase);
      const action = !stored && c.phase === "compensation" ? await this.stored(db, c, "action") : undefined;
      let refused = false;
      if (stored) {
        refused = stored.status === "refused";
        await this.resend(db, c, stored.reply, stored.reply_event_id);
      } else if (c.phase === "compensation" && action?.status !== "succeeded") {
        // 3. Null compensation; a tombstone refuses the action should it still come (4.).
        if (!action) {
          await db.query(
            `INSERT INTO participant_step (saga_id, step_name, phase, command_type, status, reply)
             VALUES ($1, $2, 'action', '', 'refused', $3) ON CONFLICT DO NOTHING`,
            [c.sagaId, c.stepName, { outcome: "failure", reason: "the step was compensated before its action arrived" }],
          );
        }
        await this.replyAndStore(db, c, "null_compensation", { outcome: "success", nullCompensation: true });
      } else {
        // 5. The handler, in a savepoint so that a retry answer leaves nothing behind.
        const handler = this.handlers.get(`${c.phase} ${c.type}`);
        if (!handler) {
          await this.reply(db, c, {
            outcome: "failure",
            reason: `participant '${this.options.name}' has no handler for ${c.phase} ${c.type}`,
          });
        } else {
          await db.query("SAVEPOINT handler");
          const reply = await handler(db, c);
          if (reply.outcome === "retry") {
            await db.query("ROLLBACK TO SAVEPOINT handler");
            await this.reply(db, c, reply);
          } else {
            await db.query("RELEASE SAVEPOINT handler");
            await this.replyAndStore(db, c, reply.outcome === "success" ? "succeeded" : "failed", reply);
          }
        }
      }
      await db.query("COMMIT");
      // Logged once it committed: a rolled-back attempt refused nothing.
      if (refused) log(`action ${c.stepName} of saga ${c.sagaId} arrived after its compensation; refused`);
    } catch (e) {
      await db.query("ROLLBACK").catch(() => undefined);
      throw e;
    } finally {
      db.release();
    }
  }

  private async stored(db: PoolClient, c: Command, phase: string) {
    const rows = await db.query(
      `SELECT status, reply, reply_event_id::text FROM participant_step
       WHERE saga_id = $1 AND step_name = $2 AND phase = $3 FOR UPDATE`,
      [c.sagaId, c.stepName, phase],
    );
    return rows.rows[0] as { status: string; reply: Reply; reply_event_id: string | null } | undefined;
  }

  // 6. The reply into the outbox, in this transaction; `sagaflow relay` publishes it.
  private async reply(db: PoolClient, c: Command, data: Reply): Promise<string> {
    const event = new CloudEvent({
      id: randomUUID(),
      type: `${c.type}.reply`,
      source: this.options.name,
      datacontenttype: "application/json",
      sagaid: c.sagaId,
      stepname: c.stepName,
      phase: c.phase,
      correlationid: c.id,
      ...(c.traceparent ? { traceparent: c.traceparent } : {}),
      ...(c.traceparent && c.tracestate ? { tracestate: c.tracestate } : {}),
      data,
    });
    const message = CeKafka.structured(event);
    await db.query(
      `INSERT INTO outbox (event_id, topic, message_key, headers, payload) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (event_id) DO NOTHING`,
      [event.id, this.options.repliesTopic, c.sagaId, message.headers, message.value],
    );
    return event.id;
  }

  private async replyAndStore(db: PoolClient, c: Command, status: string, data: Reply): Promise<void> {
    const id = await this.reply(db, c, data);
    await db.query(
      `INSERT INTO participant_step (saga_id, step_name, phase, command_type, command_event_id, status, reply,
                                     reply_event_id)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
      [c.sagaId, c.stepName, c.phase, c.type, c.id, status, data, id],
    );
  }

  // The stored reply again: its outbox row re-armed (same id, same bytes), or, if that row is gone,
  // a first row now, whose id is stored.
  private async resend(db: PoolClient, c: Command, data: Reply, replyId: string | null): Promise<void> {
    if (replyId) {
      const rearmed = await db.query(
        `UPDATE outbox SET published_at = NULL, next_attempt_at = now(), last_error = NULL, kafka_partition = NULL,
                           kafka_offset = NULL WHERE event_id = $1`,
        [replyId],
      );
      if (rearmed.rowCount === 1) return;
    }
    const id = await this.reply(db, c, data);
    await db.query(
      `UPDATE participant_step SET reply_event_id = $4, command_event_id = coalesce(command_event_id, $5)
       WHERE saga_id = $1 AND step_name = $2 AND phase = $3`,
      [c.sagaId, c.stepName, c.phase, id, c.id],
    );
  }

  private async deadLetter(message: KafkaMessage, where: string, reason: string): Promise<void> {
    log(`moving ${where} to ${this.commandsTopic}.dlq: ${reason}`);
    await this.deadLetters.send({
      topic: `${this.commandsTopic}.dlq`,
      messages: [
        {
          key: message.key,
          value: message.value,
          headers: { ...message.headers, "sagaflow-dlq-reason": reason, "sagaflow-dlq-origin": where },
        },
      ],
    });
  }
}

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2));
  const pool = new Pool({
    connectionString: options.db,
    max: 2,
    options: `-c search_path=${options.schema}`,
  });
  {
    const db = await pool.connect();
    try {
      await db.query(`CREATE SCHEMA IF NOT EXISTS ${options.schema}`);
      const missing = await db.query(
        `SELECT t FROM unnest(ARRAY['processed_event', 'participant_step', 'outbox']) t
         WHERE to_regclass($1 || '.' || t) IS NULL`,
        [options.schema],
      );
      if (missing.rows.length > 0) {
        throw new Error(
          `schema ${options.schema} has no ${missing.rows.map((r) => r.t).join(", ")}: create them with ` +
            `sagaflow migrate --db '<the URL>?options=-csearch_path%3D${options.schema}'`,
        );
      }
      await db.query(SCHEMA);
    } finally {
      db.release();
    }
  }
  const kafka = new Kafka({
    clientId: `payment-ts-${options.name}`,
    brokers: options.brokers.split(","),
    logLevel: logLevel.WARN,
  });
  if (options.createTopics) {
    const admin = kafka.admin();
    await admin.connect();
    const existing = new Set(await admin.listTopics());
    const wanted = [`${options.name}.commands`, options.repliesTopic].filter((topic) => !existing.has(topic));
    if (wanted.length > 0) {
      await admin.createTopics({ topics: wanted.map((topic) => ({ topic, numPartitions: 6 })) });
    }
    await admin.disconnect();
  }
  // kafkajs's default partitioner is the Java client's murmur2, as every sagaflow producer's: named
  // here so that nobody "fixes" its start-up warning with the legacy one.
  const producer = kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    createPartitioner: Partitioners.DefaultPartitioner,
  });
  await producer.connect();
  const participant = new Participant(options, pool, paymentHandlers(options), producer);
  // A consumer that stops is started again after a pause, whatever stopped it: a broker away, or a
  // join refused while a member of another client (a C++ replica's cooperative assignor) is still
  // registered in the group. A participant that stops reading stalls every saga it takes part in.
  let consumer: Consumer | undefined;
  let stopping = false;
  const startConsumer = async (): Promise<void> => {
    const current = kafka.consumer({
      groupId: participant.groupId,
      sessionTimeout: options.sessionTimeoutMs,
      heartbeatInterval: Math.min(3000, Math.floor(options.sessionTimeoutMs / 3)),
    });
    consumer = current;
    current.on(current.events.CRASH, (event) => {
      if (event.payload.restart || stopping) return; // kafkajs restarts it itself
      log(`consumer stopped (${event.payload.error.message}); starting it again in 2 s`);
      setTimeout(() => {
        current
          .disconnect()
          .catch(() => undefined)
          .then(() => (stopping ? undefined : startConsumer()))
          .catch((e) => log(`consumer start failed: ${(e as Error).message}`));
      }, 2000);
    });
    await current.connect();
    await current.subscribe({ topic: participant.topic, fromBeginning: true });
    // Offsets are committed after eachMessage resolves, so after the record's transaction.
    await current.run({ eachMessage: async ({ partition, message }) => participant.onRecord(partition, message) });
  };
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    log("stopping");
    await consumer?.disconnect().catch(() => undefined);
    await producer.disconnect().catch(() => undefined);
    await pool.end().catch(() => undefined);
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  await startConsumer();
  log(`running: consuming ${participant.topic} as ${participant.groupId}`);
}

main().catch((e) => {
  log(`fatal: ${(e as Error).message}`);
  process.exit(1);
});
