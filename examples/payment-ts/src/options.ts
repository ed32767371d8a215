// The command line: the C++ payment service's flags, so the demo and the tests start either alike.
export interface Options {
  db: string;
  brokers: string;
  name: string;
  schema: string;
  repliesTopic: string;
  consumerGroup?: string;
  createTopics: boolean;
  sessionTimeoutMs: number;
  limit: number;
  slowOrders: Array<[string, number]>;
  retryOrders: string;
}

const USAGE = `usage: node dist/main.js --db URL --brokers HOST:PORT [--name payment] [--schema payments]
  [--replies-topic sagaflow.replies] [--no-create-topics] [--consumer-property K=V]... [--limit 500]
  [--slow-order ORDER[:MS]]... [--slow-ms 6000] [--retry-orders PREFIX]`;

export function parseOptions(argv: string[]): Options {
  const options: Options = {
    db: process.env.SAGAFLOW_DB_URL ?? "",
    brokers: process.env.SAGAFLOW_KAFKA_BROKERS ?? "",
    name: "payment",
    schema: "payments",
    repliesTopic: "sagaflow.replies",
    createTopics: true,
    sessionTimeoutMs: 10000,
    limit: 500,
    slowOrders: [],
    retryOrders: "",
  };
  let slowMs = 6000;
  const slow: string[] = [];
  for (let i = 0; i < argv.length; ++i) {
    const flag = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value\n${USAGE}`);
      return argv[++i];
    };
    switch (flag) {
      case "--db": options.db = value(); break;
      case "--brokers": options.brokers = value(); break;
      case "--name": options.name = value(); break;
      case "--schema": options.schema = value(); break;
      case "--replies-topic": options.repliesTopic = value(); break;
      case "--no-create-topics": options.createTopics = false; break;
      case "--limit": options.limit = Number(value()); break;
      case "--slow-order": slow.push(value()); break;
      case "--slow-ms": slowMs = Number(value()); break;
      case "--retry-orders": options.retryOrders = value(); break;
      case "--consumer-property": {
        // kafkajs has no static membership (group.instance.id): it joins as a dynamic member.
        const [key, v] = value().split("=", 2);
        if (key === "session.timeout.ms") options.sessionTimeoutMs = Number(v);
        if (key === "group.id") options.consumerGroup = v;
        break;
      }
      case "--help": process.stdout.write(`${USAGE}\n`); process.exit(0); break;
      default: throw new Error(`unknown option ${flag}\n${USAGE}`);
    }
  }
  if (!options.db || !options.brokers) throw new Error(`--db and --brokers are required\n${USAGE}`);
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(options.schema)) throw new Error(`--schema ${options.schema}: a lowercase SQL name`);
  options.slowOrders = slow.map((spec) => {
    const colon = spec.lastIndexOf(":");
    return colon < 0 ? [spec, slowMs] : [spec.slice(0, colon), Number(spec.slice(colon + 1))];
  });
  return options;
}
